//! `[[subscriber]]` tables from TOML: which service feeds which lane, how many samples a turn
//! takes and how many the subscriber buffers. Errors name the file, the line and the field.

use crate::subscriber::DEFAULT_SAMPLES_PER_TURN;
use crate::{Error, LaneSubscriber, Node, SubscriberOptions, SubscriberStats, MAX_BUFFER};
use iceoryx2::prelude::ZeroCopySend;
use iceoryx2::service::service_name::ServiceName;
use lfrt::{Context, Runtime};
use serde::Deserialize;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use toml::Spanned;

/// Largest `samples_per_turn`: a turn holds its lane thread for that many handler calls.
const MAX_SAMPLES_PER_TURN: i64 = 65_536;

/// One `[[subscriber]]` table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubscriberConfig {
    /// The iceoryx2 service name (`service = "sensor/imu"`).
    pub service: String,
    /// The lane (lfrt lane) whose threads serve it (`lane = "control"`).
    pub lane: String,
    /// Most samples one turn hands to the handler before the handle is re-armed
    /// (`samples_per_turn`, default 16, 1 to 65536).
    pub samples_per_turn: usize,
    /// Samples the subscriber buffers (`buffer`, 1 to 4096; left out: 16, or what the service
    /// allows if that is less). More than the service allows is refused at registration.
    pub buffer: Option<usize>,
    /// Create the service if it does not exist (`create`, default false: a missing service is
    /// an error).
    pub create: bool,
    index: usize,
    lane_line: Option<usize>,
    buffer_line: Option<usize>,
    file: Option<PathBuf>,
}

/// The `[[subscriber]]` tables of a TOML file (their own file, beside lfrt's).
///
/// # Examples
/// ```
/// let cfg = lfrt_iceoryx2::Config::parse(
///     "[[subscriber]]\nservice = \"sensor/imu\"\nlane = \"control\"\nsamples_per_turn = 8\nbuffer = 64\n",
/// )?;
/// let imu = cfg.subscriber("sensor/imu").unwrap();
/// assert_eq!(
///     (imu.lane.as_str(), imu.samples_per_turn, imu.buffer, imu.create),
///     ("control", 8, Some(64), false)
/// );
///
/// let bad = lfrt_iceoryx2::Config::parse("[[subscriber]]\nservice = \"a\"\nlane = \"b\"\nsamples_per_turn = 0\n");
/// assert_eq!(
///     bad.unwrap_err().to_string(),
///     "4: subscriber[0].samples_per_turn: must be 1 to 65536, not 0"
/// );
/// # Ok::<(), lfrt_iceoryx2::Error>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Config {
    /// The subscribers, in file order.
    pub subscribers: Vec<SubscriberConfig>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Document {
    #[serde(default)]
    subscriber: Vec<Spanned<Raw>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    service: Spanned<String>,
    lane: Spanned<String>,
    samples_per_turn: Option<Spanned<i64>>,
    buffer: Option<Spanned<i64>>,
    #[serde(default)]
    create: bool,
}

impl Config {
    /// Reads and checks a file.
    ///
    /// # Errors
    /// [`Error::Config`] naming the file, line and field.
    pub fn load(file: &Path) -> Result<Config, Error> {
        let src = std::fs::read_to_string(file).map_err(|e| Error::Config {
            file: Some(file.to_path_buf()),
            line: None,
            field: "file".into(),
            message: format!("cannot read: {e}"),
        })?;
        parse(&src, Some(file))
    }

    /// Parses and checks TOML text, as [`load`](Self::load) does a file.
    ///
    /// # Errors
    /// [`Error::Config`] naming the line and field: syntax, unknown keys, wrong types, an
    /// invalid service name, `samples_per_turn` out of 1..=65536, `buffer` out of 1..=4096, a
    /// service listed twice.
    pub fn parse(src: &str) -> Result<Config, Error> {
        parse(src, None)
    }

    /// The table of `service`, if any.
    pub fn subscriber(&self, service: &str) -> Option<&SubscriberConfig> {
        self.subscribers.iter().find(|s| s.service == service)
    }
}

fn line_of(src: &str, at: usize) -> usize {
    src[..at.min(src.len())].matches('\n').count() + 1
}

fn parse(src: &str, file: Option<&Path>) -> Result<Config, Error> {
    let err = |at: Option<usize>, field: String, message: String| Error::Config {
        file: file.map(Path::to_path_buf),
        line: at.map(|a| line_of(src, a)),
        field,
        message,
    };
    let doc: Document = toml::from_str(src).map_err(|e| {
        err(
            e.span().map(|s| s.start),
            "subscriber".into(),
            e.message().to_owned(),
        )
    })?;
    let mut subscribers: Vec<SubscriberConfig> = Vec::new();
    for (i, raw) in doc.subscriber.into_iter().enumerate() {
        let raw = raw.into_inner();
        let field = |k: &str| format!("subscriber[{i}].{k}");
        let service = raw.service.get_ref();
        if let Err(e) = ServiceName::new(service) {
            return Err(err(
                Some(raw.service.span().start),
                field("service"),
                format!("`{service}` is not an iceoryx2 service name ({e:?})"),
            ));
        }
        if let Some(first) = subscribers.iter().find(|s| &s.service == service) {
            return Err(err(
                Some(raw.service.span().start),
                field("service"),
                format!(
                    "`{service}` is already subscribed by subscriber[{}]",
                    first.index
                ),
            ));
        }
        if raw.lane.get_ref().is_empty() {
            return Err(err(
                Some(raw.lane.span().start),
                field("lane"),
                "must name a lane".into(),
            ));
        }
        let samples_per_turn = match raw.samples_per_turn {
            None => DEFAULT_SAMPLES_PER_TURN,
            Some(n) if (1..=MAX_SAMPLES_PER_TURN).contains(n.get_ref()) => *n.get_ref() as usize,
            Some(n) => {
                return Err(err(
                    Some(n.span().start),
                    field("samples_per_turn"),
                    format!("must be 1 to {MAX_SAMPLES_PER_TURN}, not {}", n.get_ref()),
                ))
            }
        };
        let buffer = match &raw.buffer {
            None => None,
            Some(n) if (1..=MAX_BUFFER as i64).contains(n.get_ref()) => Some(*n.get_ref() as usize),
            Some(n) => {
                return Err(err(
                    Some(n.span().start),
                    field("buffer"),
                    format!("must be 1 to {MAX_BUFFER}, not {}", n.get_ref()),
                ))
            }
        };
        subscribers.push(SubscriberConfig {
            service: service.clone(),
            lane: raw.lane.get_ref().clone(),
            samples_per_turn,
            buffer,
            create: raw.create,
            index: i,
            lane_line: Some(line_of(src, raw.lane.span().start)),
            buffer_line: raw.buffer.map(|b| line_of(src, b.span().start)),
            file: file.map(Path::to_path_buf),
        });
    }
    Ok(Config { subscribers })
}

impl SubscriberConfig {
    /// This table's `samples_per_turn`, `buffer` and `create`.
    pub fn options(&self) -> SubscriberOptions {
        SubscriberOptions {
            samples_per_turn: self.samples_per_turn,
            buffer: self.buffer,
            create: self.create,
        }
    }

    /// Opens this table's service for payload `T` and registers it, with `handler`, in its
    /// lane of `rt`. Returns the subscriber's counters.
    ///
    /// # Errors
    /// [`Error::Config`] pointing at this table's `lane` if `rt` has no such lane, or at its
    /// `buffer` if that is more than the service allows; the other errors of
    /// [`LaneSubscriber::open`] and [`LaneSubscriber::register`].
    pub fn register<T, H>(
        &self,
        rt: &Runtime,
        node: &Node,
        handler: H,
    ) -> Result<Arc<SubscriberStats>, Error>
    where
        T: fmt::Debug + ZeroCopySend + Send + 'static,
        H: FnMut(&T, &mut Context) + Send + 'static,
    {
        let lane = rt.lane(&self.lane).map_err(|e| Error::Config {
            file: self.file.clone(),
            line: self.lane_line,
            field: format!("subscriber[{}].lane", self.index),
            message: e.to_string(),
        })?;
        let (sub, stats) = LaneSubscriber::open(node, &self.service, self.options(), handler)
            .map_err(|e| match e {
                e @ Error::BufferTooLarge { .. } => Error::Config {
                    file: self.file.clone(),
                    line: self.buffer_line,
                    field: format!("subscriber[{}].buffer", self.index),
                    message: e.to_string(),
                },
                e => e,
            })?;
        sub.register(&lane.registry())?;
        Ok(stats)
    }
}
