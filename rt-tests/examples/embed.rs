//! Embedding lfrt from code, no TOML: two lanes, a custom handler, a periodic timer.
//!
//! ```text
//! cargo run --release --example embed
//! ```
//! Serves an "uppercase" UDP service on 127.0.0.1 (ephemeral port) in a low-priority lane and
//! a 1 ms timer in a high-priority lane, sends itself 1000 requests, prints the metrics and
//! stops (about 1 s). Without CAP_SYS_NICE it runs at normal priority (best-effort).

use lfrt::handlers::PeriodicTimer;
use lfrt::{
    Context, Disposition, Event, EventHandler, LaneConfig, Policy, Promotion, RtMode, Runtime,
    RuntimeConfig, Timer,
};
use std::net::UdpSocket;
use std::os::fd::{AsFd, BorrowedFd};
use std::time::Duration;

// Counts allocations per thread so the runtime can report `pool_allocations`.
#[global_allocator]
static ALLOC: lfrt::CountingAlloc = lfrt::CountingAlloc;

/// The application's concrete event handler: replies with the datagram upper-cased.
struct Uppercase {
    socket: UdpSocket,
}

impl EventHandler for Uppercase {
    fn source(&self) -> BorrowedFd<'_> {
        self.socket.as_fd()
    }

    fn handle(&mut self, _event: &Event, ctx: &mut Context) -> Disposition {
        // The thread's preallocated datagram slots: no allocation per request. One recvmmsg
        // takes what is queued now; the re-armed handle brings the rest.
        let batch = ctx.datagrams();
        if batch.recv(self.socket.as_fd()).is_ok() {
            for i in 0..batch.len() {
                let mut d = batch.get(i);
                d.payload_mut().make_ascii_uppercase(); // rewrite in place
                d.answer(); // mark it: only marked datagrams are answered
            }
            batch.reply(self.socket.as_fd()); // one sendmmsg, each answer to its source
        }
        Disposition::Rearm
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let cfg = RuntimeConfig {
        trace: Default::default(),
        rt: RtMode::BestEffort,
        lock_memory: false,
        lanes: Vec::new(), // added below, each returning its Lane
        bands: Vec::new(),
    };
    let mut rt = Runtime::new(cfg)?;
    let mut control = LaneConfig::new("control", Policy::Fifo, 80);
    control.threads = 1;
    let control = rt.add_lane(control)?;
    let mut service = LaneConfig::new("service", Policy::Fifo, 40);
    service.threads = 2;
    service.promotion = Promotion::Lifo;
    let service = rt.add_lane(service)?;

    let socket = UdpSocket::bind("127.0.0.1:0")?;
    socket.set_nonblocking(true)?;
    let addr = socket.local_addr()?;
    service
        .registry()
        .register(Box::new(Uppercase { socket }))?;
    let mut timer = Timer::new()?;
    timer.arm(lfrt::task::time::now_ns() + 1_000_000, 1_000_000)?;
    control
        .registry()
        .register(Box::new(PeriodicTimer::new(timer)))?;
    let report = rt.start()?;
    println!("started: rt_applied={} (serving {addr})", report.rt_applied);

    let client = UdpSocket::bind("127.0.0.1:0")?;
    client.set_read_timeout(Some(Duration::from_secs(2)))?;
    let mut buf = [0u8; 64];
    let mut ok = 0;
    for i in 0..1000 {
        let msg = format!("hello {i}");
        client.send_to(msg.as_bytes(), addr)?;
        let (n, _) = client.recv_from(&mut buf)?;
        ok += usize::from(buf[..n] == *msg.to_uppercase().as_bytes());
    }
    std::thread::sleep(Duration::from_millis(200));
    let timer_latency = rt.telemetry().lane_latency(0);
    for m in rt.shutdown()? {
        println!(
            "{:<8} prio {:>2}: {} dispatched, {} promotions, {} with no follower, {} allocations after warm-up",
            m.name, m.priority, m.dispatched, m.promotions, m.promotions_no_follower,
            // `-`: not measured (no pool thread reached its warm-up of 64 dispatches).
            m.pool_allocations
                .map_or_else(|| "-".to_owned(), |n| n.to_string())
        );
    }
    println!(
        "replies: {ok}/1000 correct; timer latency p50 {:.1} us, p99 {:.1} us",
        timer_latency.p50_ns as f64 / 1e3,
        timer_latency.p99_ns as f64 / 1e3
    );
    Ok(())
}
