//! Awaiting a task: the [`JoinHandle`], from a lane task, a tokio task or a plain thread.

use crate::task::executor::{Shared, Slot};
use crate::task::state;
use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Poll, Waker};

/// Why a task gave no output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JoinError {
    /// The task was cancelled ([`JoinHandle::cancel`], or the runtime shut down).
    Cancelled,
    /// The task's future panicked (the panic was caught and counted).
    Panicked,
}

impl fmt::Display for JoinError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            JoinError::Cancelled => "the task was cancelled",
            JoinError::Panicked => "the task panicked",
        })
    }
}

impl std::error::Error for JoinError {}

/// A spawned task: await it for the output, or [`cancel`](Self::cancel) it. Dropping the
/// handle detaches the task (it runs on; its output is dropped when it finishes).
///
/// Awaitable from anywhere: a lane task, a tokio task, or [`JoinHandle::wait`]'s blocking
/// wait on a plain thread.
pub struct JoinHandle<T> {
    pub(super) shared: Arc<Shared>,
    pub(super) index: u32,
    pub(super) gen: u16,
    /// The outcome was taken (and the slot released).
    pub(super) done: bool,
    pub(super) _output: PhantomData<fn() -> T>,
}

impl<T> fmt::Debug for JoinHandle<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JoinHandle")
            .field("lane", &self.shared.lane)
            .field("slot", &self.index)
            .finish_non_exhaustive()
    }
}

impl<T> JoinHandle<T> {
    fn slot(&self) -> &Slot {
        &self.shared.slots[self.index as usize]
    }

    /// Requests cancellation: the task's future is dropped on its lane the next time it is
    /// taken from the ready set (at once if it is not running), and awaiting the handle gives
    /// [`JoinError::Cancelled`], unless the task finished first.
    pub fn cancel(&self) {
        if !self.done && self.slot().state.cancel(self.gen) {
            self.shared.wake(self.index, self.gen);
        }
    }

    /// True once the task finished (output ready, cancelled or panicked).
    pub fn is_finished(&self) -> bool {
        self.done || self.slot().state.load() & state::COMPLETE != 0
    }

    /// Blocks the calling thread until the task finishes. For plain threads (tests, set-up
    /// code); never call it on a lane thread.
    ///
    /// # Errors
    /// As awaiting the handle.
    pub fn wait(mut self) -> Result<T, JoinError> {
        let parker = Arc::new(ThreadWaker(std::thread::current()));
        let waker = Waker::from(parker);
        let mut cx = std::task::Context::from_waker(&waker);
        loop {
            if let Poll::Ready(r) = Pin::new(&mut self).poll(&mut cx) {
                return r;
            }
            std::thread::park();
        }
    }
}

struct ThreadWaker(std::thread::Thread);

impl std::task::Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

impl<T> Future for JoinHandle<T> {
    type Output = Result<T, JoinError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<Self::Output> {
        assert!(
            !self.done,
            "JoinHandle polled after it returned its outcome"
        );
        let slot = self.slot();
        let mut s = slot.state.load();
        if s & state::COMPLETE == 0 {
            // Register, then look again: the completing thread sets COMPLETE before it takes
            // the waker under the same lock, so one of the two sees the other.
            {
                let mut j = slot.joiner.lock();
                match &*j {
                    Some(w) if w.will_wake(cx.waker()) => {}
                    _ => *j = Some(cx.waker().clone()),
                }
            }
            s = slot.state.load();
            if s & state::COMPLETE == 0 {
                return Poll::Pending;
            }
        }
        let out = if s & state::OUTPUT != 0 {
            // SAFETY: a published task's vtable was written before the release that published
            // it; COMPLETE was observed with acquire.
            let vt = unsafe { (*slot.vtable.get()).expect("a live slot has a vtable") };
            let mut v = std::mem::MaybeUninit::<T>::uninit();
            // SAFETY: COMPLETE with OUTPUT: the output is stored and only the handle takes it
            // (once: `done` is set below). The vtable is the spawned future's, whose output
            // type is this handle's `T` (`spawn_with_priority` returns `JoinHandle<F::Output>`),
            // so `v` is a valid destination and is initialised by the call.
            let v = unsafe {
                (vt.take_output)(self.shared.storage.at(self.index), v.as_mut_ptr().cast());
                v.assume_init()
            };
            slot.state.output_taken();
            Ok(v)
        } else if s & state::PANICKED != 0 {
            Err(JoinError::Panicked)
        } else {
            Err(JoinError::Cancelled)
        };
        self.done = true;
        if self.slot().state.release_handle() {
            self.shared.release(self.index);
        }
        Poll::Ready(out)
    }
}

impl<T> Drop for JoinHandle<T> {
    fn drop(&mut self) {
        if !self.done && self.slot().state.release_handle() {
            self.shared.release(self.index);
        }
    }
}
