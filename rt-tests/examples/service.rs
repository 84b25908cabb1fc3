//! The service of issue #14, as a user would write it: a market-data UDP feed in a high lane, a
//! 1 kHz control loop in the highest lane, and a TCP admin endpoint in a time-shared lane that
//! answers with live counters and can stop the service.
//!
//! ```text
//! cargo run --release --example service -- 3     # run 3 s with a built-in feed and admin client
//! ```
//! Everything listens on 127.0.0.1 (ephemeral ports). Bounded: a 20 k datagrams/s feed for the
//! given seconds (default 3), then the built-in client sends `stop` to the admin endpoint.

use lfrt::timer::{CallbackTimer, Expiry};
use lfrt::{Context, Disposition, Event, EventHandler, LaneConfig, Policy, Runtime, Stopper};
use lfrt::{MetricsHandle, RuntimeConfig};
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, UdpSocket};
use std::os::fd::{AsFd, BorrowedFd};
use std::time::Duration;

// ---- user code starts here -----------------------------------------------------------------
struct Feed(UdpSocket, u64);
impl EventHandler for Feed {
    fn source(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
    fn handle(&mut self, _: &Event, ctx: &mut Context) -> Disposition {
        let batch = ctx.datagrams();
        while let Ok(n) = batch.recv(self.0.as_fd()) {
            self.1 += n as u64; // a real feed would update its book here (nothing is replied)
        }
        Disposition::Rearm
    }
}

struct Admin(TcpListener, MetricsHandle, Stopper);
impl EventHandler for Admin {
    fn source(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
    fn handle(&mut self, _: &Event, _: &mut Context) -> Disposition {
        while let Ok((conn, _)) = self.0.accept() {
            let _ = conn.set_read_timeout(Some(Duration::from_millis(100)));
            let mut line = String::new();
            let _ = BufReader::new(&conn).read_line(&mut line);
            let mut out = &conn;
            for m in self.1.get() {
                let _ = writeln!(
                    out,
                    "{} dispatched={} panics={}",
                    m.name, m.dispatched, m.handler_panics
                );
            }
            if line.trim() == "stop" {
                self.2.stop();
            }
        }
        Disposition::Rearm
    }
}

fn service() -> Result<(Runtime, u16, u16), Box<dyn std::error::Error>> {
    let lane = |name: &str, policy, priority, threads| {
        let mut g = LaneConfig::new(name, policy, priority);
        g.threads = threads;
        g
    };
    let mut rt = Runtime::new(RuntimeConfig::default())?;
    let control = rt.add_lane(lane("control", Policy::Fifo, 90, 1))?;
    let feed_lane = rt.add_lane(lane("feed", Policy::Fifo, 60, 2))?;
    let admin_lane = rt.add_lane(lane("admin", Policy::Other, 0, 1))?;
    let (tick, _) = CallbackTimer::periodic(
        Expiry::After(Duration::from_millis(1)),
        Duration::from_millis(1),
        |_, _| { /* read sensors, write actuators */ },
    )?;
    control.registry().register(Box::new(tick))?;
    let feed = UdpSocket::bind("127.0.0.1:0")?;
    feed.set_nonblocking(true)?;
    let feed_port = feed.local_addr()?.port();
    feed_lane.registry().register(Box::new(Feed(feed, 0)))?;
    let admin = TcpListener::bind("127.0.0.1:0")?;
    admin.set_nonblocking(true)?;
    let admin_port = admin.local_addr()?.port();
    let handler = Admin(admin, rt.metrics_handle(), rt.stopper());
    admin_lane.registry().register(Box::new(handler))?;
    rt.start()?;
    Ok((rt, feed_port, admin_port))
}
// ---- user code ends here: what follows drives the example -----------------------------------

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let secs: u64 = std::env::args().nth(1).map_or(Ok(3), |s| s.parse())?;
    let (mut rt, feed_port, admin_port) = service()?;
    println!("feed 127.0.0.1:{feed_port}  admin 127.0.0.1:{admin_port}");
    let driver = std::thread::spawn(move || -> std::io::Result<()> {
        let tx = UdpSocket::bind("127.0.0.1:0")?;
        for s in 0..secs {
            for _ in 0..1000 {
                for _ in 0..20 {
                    tx.send_to(b"tick", ("127.0.0.1", feed_port))?;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            let mut c = std::net::TcpStream::connect(("127.0.0.1", admin_port))?;
            c.write_all(if s + 1 == secs { b"stop\n" } else { b"stats\n" })?;
            for line in BufReader::new(c).lines() {
                println!("admin @{}s: {}", s + 1, line?);
            }
        }
        Ok(())
    });
    rt.wait();
    driver.join().expect("driver thread")?;
    for m in rt.shutdown()? {
        println!(
            "{:<8} dispatched={} kernel: {}",
            m.name,
            m.dispatched,
            m.kernel_sched.join(", ")
        );
    }
    Ok(())
}
