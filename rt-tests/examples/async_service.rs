//! A tokio service that offloads its real-time part to lfrt lanes (issue #23): the 1 kHz
//! control loop is an `async fn` on a SCHED_FIFO 90 lane, a market-data feed lane (SCHED_FIFO
//! 60) turns UDP datagrams into set-points for it, and the admin endpoint is served by tokio
//! with a text protocol (`stats`, `setpoint <n>`, `stop`).
//!
//! ```text
//! cargo run --release -p lfrt-tools --example async_service -- 3   # 3 s, built-in clients
//! ```
//! Everything listens on 127.0.0.1 (ephemeral ports). Bounded: a 5 k datagrams/s feed for the
//! given seconds (default 3); the built-in admin client asks `stats` each second, sets a
//! set-point, then sends `stop`. Without CAP_SYS_NICE the lanes run time-shared
//! (`rt = "best-effort"`) and say so.
//!
//! ```text
//!  UDP feed ──▶ [feed lane, FIFO 60] Feed handler ─try_send─▶ feed task (async) ─┐
//!                                                                                │ set-points
//!  tokio: admin TCP ── "setpoint 7" ── send().await ──────────────────────────▶ control loop
//!        ◀──────────────────────── reply slot ◀──── answered on the lane ─── (async, FIFO 90,
//!                                                                              1 ms interval)
//! ```

use lfrt::task::{channel, Receiver, ReplySender, ReplySlots, Sender};
use lfrt::{Context, Disposition, Event, EventHandler, LaneConfig, Policy, RtMode, Runtime};
use lfrt::{MetricsHandle, RuntimeConfig, Stopper};
use std::net::UdpSocket;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::*};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

#[global_allocator]
static ALLOC: lfrt::CountingAlloc = lfrt::CountingAlloc;

// ---- user code starts here -----------------------------------------------------------------

/// What the control loop publishes (read by the admin endpoint).
#[derive(Default)]
struct ControlStats {
    ticks: AtomicU64,
    missed: AtomicU64,
    max_late_ns: AtomicU64,
    setpoint: AtomicI64,
    feed_updates: AtomicU64,
}

/// A command to the control loop.
enum Command {
    /// From the feed: a new target.
    Target(i64),
    /// From the admin endpoint: set the set-point, answer with the old one.
    SetPoint(i64, ReplySender<i64>),
}

/// The real-time part: a 1 kHz loop at the control lane's priority.
async fn control_loop(mut commands: Receiver<Command>, stats: Arc<ControlStats>) {
    let mut every_ms = lfrt::task::time::interval(Duration::from_millis(1));
    let mut setpoint = 0i64;
    let mut output = 0i64;
    loop {
        let tick = every_ms.tick().await;
        let late = lfrt::task::time::now_ns().saturating_sub(tick.due_ns);
        stats.max_late_ns.fetch_max(late, Relaxed);
        stats.missed.fetch_add(tick.missed, Relaxed);
        while let Some(cmd) = commands.try_recv() {
            match cmd {
                Command::Target(t) => {
                    setpoint = t;
                    stats.feed_updates.fetch_add(1, Relaxed);
                }
                Command::SetPoint(s, reply) => reply.send(std::mem::replace(&mut setpoint, s)),
            }
        }
        output += (setpoint - output) / 4; // a proportional step toward the set-point
        stats.setpoint.store(setpoint, Relaxed);
        stats.ticks.fetch_add(1, Relaxed);
        let _ = output;
    }
}

/// The feed lane's UDP handler: parses each datagram and hands the value to the feed task.
struct Feed(UdpSocket, Sender<i64>);
impl EventHandler for Feed {
    fn source(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
    fn handle(&mut self, _: &Event, ctx: &mut Context) -> Disposition {
        let buf = ctx.buffer();
        while let Ok(n) = self.0.recv(buf) {
            let v = std::str::from_utf8(&buf[..n])
                .ok()
                .and_then(|s| s.trim().parse().ok());
            if let Some(v) = v {
                let _ = self.1.try_send(v); // a full channel is counted (`refused`)
            }
        }
        Disposition::Rearm
    }
}

/// The feed task: forwards every 100th price as a new control target.
async fn feed_task(mut prices: Receiver<i64>, control: Sender<Command>) {
    let mut n = 0u64;
    while let Some(p) = prices.recv().await {
        n += 1;
        if n.is_multiple_of(100) {
            control.send(Command::Target(p)).await;
        }
    }
}

/// The admin endpoint (tokio): one command per connection, one line of answer.
async fn admin(
    listener: tokio::net::TcpListener,
    control: Sender<Command>,
    replies: ReplySlots<i64>,
    stats: Arc<ControlStats>,
    metrics: MetricsHandle,
    stopper: Stopper,
) {
    loop {
        let Ok((conn, _)) = listener.accept().await else {
            continue;
        };
        let (r, mut w) = conn.into_split();
        let mut line = String::new();
        if BufReader::new(r).read_line(&mut line).await.is_err() {
            continue;
        }
        let mut words = line.split_whitespace();
        let answer = match (words.next(), words.next().map(str::parse::<i64>)) {
            (Some("stats"), None) => {
                let m = metrics.get();
                format!(
                    "control ticks={} missed={} max_late_us={} setpoint={} feed_updates={}; {}",
                    stats.ticks.load(Relaxed),
                    stats.missed.load(Relaxed),
                    stats.max_late_ns.load(Relaxed) / 1000,
                    stats.setpoint.load(Relaxed),
                    stats.feed_updates.load(Relaxed),
                    m.iter()
                        .map(|g| format!("{} dispatched={}", g.name, g.dispatched))
                        .collect::<Vec<_>>()
                        .join(" "),
                )
            }
            (Some("setpoint"), Some(Ok(v))) => match replies.take() {
                Some((tx, rx)) => {
                    control.send(Command::SetPoint(v, tx)).await;
                    match rx.await {
                        Some(old) => format!("ok setpoint={v} was={old}"),
                        None => "error: the control loop is gone".into(),
                    }
                }
                None => "error: busy (no free reply slot)".into(),
            },
            (Some("stop"), None) => {
                stopper.stop();
                "bye".into()
            }
            _ => "error: commands are `stats`, `setpoint <integer>`, `stop`".into(),
        };
        let _ = w.write_all(format!("{answer}\n").as_bytes()).await;
        if answer == "bye" {
            return;
        }
    }
}

struct Service {
    rt: Runtime,
    feed_port: u16,
    admin_port: u16,
    tokio: tokio::runtime::Runtime,
}

fn service() -> Result<Service, Box<dyn std::error::Error>> {
    let lane = |name: &str, priority| {
        let mut g = LaneConfig::new(name, Policy::Fifo, priority);
        g.threads = 1;
        g.buffer_bytes = 2048;
        g.max_tasks = 4;
        g
    };
    let mut rt = Runtime::new(RuntimeConfig {
        rt: RtMode::BestEffort,
        ..RuntimeConfig::default()
    })?;
    let control = rt.add_lane(lane("control", 90))?;
    let feed_lane = rt.add_lane(lane("feed", 60))?;
    let (metrics, stopper) = (rt.metrics_handle(), rt.stopper());
    let stats = Arc::new(ControlStats::default());
    let (to_control, commands) = channel::<Command>(64);
    let (prices_tx, prices) = channel::<i64>(256);
    let feed = UdpSocket::bind("127.0.0.1:0")?;
    feed.set_nonblocking(true)?;
    let feed_port = feed.local_addr()?.port();
    feed_lane
        .registry()
        .register(Box::new(Feed(feed, prices_tx)))?;
    rt.start()?;
    control
        .spawn(control_loop(commands, stats.clone()))
        .map_err(|e| e.to_string())?;
    feed_lane
        .spawn(feed_task(prices, to_control.clone()))
        .map_err(|e| e.to_string())?;
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_io()
        .build()?;
    let listener = tokio.block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))?;
    let admin_port = listener.local_addr()?.port();
    let replies = ReplySlots::new(8);
    tokio.spawn(admin(
        listener, to_control, replies, stats, metrics, stopper,
    ));
    Ok(Service {
        rt,
        feed_port,
        admin_port,
        tokio,
    })
}
// ---- user code ends here: what follows drives the example -----------------------------------

fn ask(port: u16, command: &str) -> std::io::Result<String> {
    use std::io::{BufRead, Write};
    let mut c = std::net::TcpStream::connect(("127.0.0.1", port))?;
    c.write_all(command.as_bytes())?;
    c.write_all(b"\n")?;
    let mut line = String::new();
    std::io::BufReader::new(c).read_line(&mut line)?;
    Ok(line.trim_end().to_owned())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let secs: u64 = std::env::args().nth(1).map_or(Ok(3), |s| s.parse())?;
    let Service {
        mut rt,
        feed_port,
        admin_port,
        tokio,
    } = service()?;
    println!("feed 127.0.0.1:{feed_port}  admin 127.0.0.1:{admin_port}");
    let driver = std::thread::spawn(move || -> std::io::Result<()> {
        let tx = UdpSocket::bind("127.0.0.1:0")?;
        let mut price = 1000i64;
        for s in 0..secs {
            for ms in 0..1000 {
                for _ in 0..5 {
                    price += if (ms + s as i64) % 3 == 0 { 1 } else { -1 };
                    tx.send_to(price.to_string().as_bytes(), ("127.0.0.1", feed_port))?;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            println!("admin @{}s: {}", s + 1, ask(admin_port, "stats")?);
            if s == 0 {
                println!("admin @{}s: {}", s + 1, ask(admin_port, "setpoint 7")?);
            }
        }
        println!("admin: {}", ask(admin_port, "stop")?);
        Ok(())
    });
    rt.wait();
    driver.join().expect("driver thread")?;
    drop(tokio);
    for m in rt.shutdown()? {
        println!(
            "{:<8} dispatched={} kernel: {} allocations after warm-up: {}",
            m.name,
            m.dispatched,
            m.kernel_sched.join(", "),
            m.pool_allocations
                .map_or_else(|| "not measured".to_owned(), |n| n.to_string()),
        );
    }
    Ok(())
}
