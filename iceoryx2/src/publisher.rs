//! The publishing side: a sample, then a notification that wakes the subscribers' lanes.

use crate::{
    event_service, iceoryx, pubsub_service, Error, Node, Service, DATA_EVENT, SUBSCRIBER_BUFFER,
};
use iceoryx2::port::notifier::Notifier;
use iceoryx2::port::publisher::Publisher as IoxPublisher;
use iceoryx2::prelude::{EventId, ZeroCopySend};
use std::fmt;

/// Publishes samples of `T` on a service and notifies its listeners, so that every
/// [`LaneSubscriber`](crate::LaneSubscriber) of it is woken in its lane.
///
/// # Real-time safety
/// Each [`publish`](Self::publish) allocates once (iceoryx2's loan puts the sample's shared
/// state behind an `Arc`; measured by `tests/receive.rs`): use it from a sensor process or a
/// non-real-time thread, not from a lane whose `pool_allocations` must stay 0.
///
/// # Examples
/// ```no_run
/// let node = lfrt_iceoryx2::node()?;
/// let imu = lfrt_iceoryx2::Publisher::<u64>::create(&node, "sensor/imu")?;
/// imu.publish(42)?;
/// # Ok::<(), lfrt_iceoryx2::Error>(())
/// ```
pub struct Publisher<T>
where
    T: fmt::Debug + ZeroCopySend + 'static,
{
    service: String,
    // Dropped in declaration order: the publisher port leaves the service before the notifier
    // announces it (iceoryx2's notifier-dropped event), as it joined before the notifier
    // announced that (notifier-created event).
    publisher: IoxPublisher<Service, T, ()>,
    notifier: Notifier<Service>,
}

impl<T> fmt::Debug for Publisher<T>
where
    T: fmt::Debug + ZeroCopySend + 'static,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Publisher")
            .field("service", &self.service)
            .finish_non_exhaustive()
    }
}

impl<T> Publisher<T>
where
    T: fmt::Debug + ZeroCopySend + 'static,
{
    /// Opens `service` for payload `T` with its event service, creating it if it does not
    /// exist (with safe overflow and room for [`SUBSCRIBER_BUFFER`] samples per subscriber).
    ///
    /// Creating the publisher announces it to the service's subscribers (iceoryx2's
    /// notifier-created event, counted in their `connections_updated`); dropping it too.
    ///
    /// # Errors
    /// [`Error::Incompatible`] if the service exists with another payload type, size or
    /// alignment (or its event service with other settings); [`Error::Iceoryx`] otherwise.
    pub fn create(node: &Node, service: &str) -> Result<Self, Error> {
        let pubsub = pubsub_service::<T>(node, service, Some(SUBSCRIBER_BUFFER))?;
        let events = event_service(node, service)?;
        let publisher = pubsub
            .publisher_builder()
            .create()
            .map_err(|e| iceoryx("creating a publisher", service, e))?;
        let notifier = events
            .notifier_builder()
            .default_event_id(EventId::new(DATA_EVENT))
            .create()
            .map_err(|e| iceoryx("creating a notifier", service, e))?;
        Ok(Publisher {
            service: service.to_owned(),
            publisher,
            notifier,
        })
    }

    /// Writes `value` into a loaned shared-memory sample, sends it and notifies the listeners.
    /// Returns how many subscribers received it.
    ///
    /// # Errors
    /// [`Error::Iceoryx`] if the loan, the send or the notification fails (e.g. all samples
    /// are still held by slow subscribers).
    pub fn publish(&self, value: T) -> Result<usize, Error> {
        let sample = self
            .publisher
            .loan_uninit()
            .map_err(|e| iceoryx("loaning a sample", &self.service, e))?;
        let receivers = sample
            .write_payload(value)
            .send()
            .map_err(|e| iceoryx("sending a sample", &self.service, e))?;
        self.notifier
            .notify()
            .map_err(|e| iceoryx("notifying the listeners", &self.service, e))?;
        Ok(receivers)
    }
}
