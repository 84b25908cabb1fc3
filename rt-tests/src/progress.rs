//! Progress of a long harness (`lfrt inversion`, the echo benchmark): `experiment k/n`, the time
//! elapsed and an estimate of the time left, drawn by `indicatif` on stderr when stderr is a
//! terminal, and nothing of it anywhere else, so a pipe or a log file gets only the harness's
//! own lines.
//!
//! ```text
//! experiment 3/9 ███████░░░░░░░░░░░░░░ elapsed 00:00:07, about 14s left
//! ```
//!
//! The estimate is indicatif's, from the steps done so far: steps of equal length give a good
//! one. A harness prints its per-step lines through [`Progress::println`] (stderr, above the
//! bar) or writes to stdout inside [`Progress::suspend`], so the bar never tears a line.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;

/// A progress bar over a fixed number of steps, or nothing when stderr is not a terminal.
#[derive(Debug)]
pub struct Progress {
    bar: Option<ProgressBar>,
}

impl Progress {
    /// `steps` steps, each called `unit` in the bar (`experiment 3/9`, `cell 2/15`), drawn on
    /// stderr if stderr is a terminal; otherwise the bar is never drawn.
    pub fn new(steps: u64, unit: &str) -> Progress {
        let target = std::io::stderr()
            .is_terminal()
            .then(ProgressDrawTarget::stderr);
        Progress::on(steps, unit, target)
    }

    /// As [`Progress::new`], drawing on `target` (none: not drawn at all).
    fn on(steps: u64, unit: &str, target: Option<ProgressDrawTarget>) -> Progress {
        let bar = target.map(|target| {
            let bar = ProgressBar::with_draw_target(Some(steps), target);
            // A brace would open a template key; a unit is a plain word.
            let unit: String = unit.chars().filter(|c| !matches!(c, '{' | '}')).collect();
            bar.set_style(
                ProgressStyle::with_template(&format!(
                    "{unit} {{pos}}/{{len}} {{wide_bar}} elapsed {{elapsed}}, about {{eta}} left"
                ))
                .expect("valid progress template"),
            );
            bar.tick();
            bar
        });
        Progress { bar }
    }

    /// Whether the bar is drawn (stderr is a terminal).
    pub fn is_drawn(&self) -> bool {
        self.bar.is_some()
    }

    /// Prints `line` on stderr: above the bar, or on its own line when there is no bar.
    pub fn println(&self, line: &str) {
        match &self.bar {
            Some(bar) => bar.println(line),
            None => eprintln!("{line}"),
        }
    }

    /// Runs `f` with the bar cleared from the terminal and draws it again afterwards: for output
    /// to stdout, which shares the terminal with the bar.
    pub fn suspend<R>(&self, f: impl FnOnce() -> R) -> R {
        match &self.bar {
            Some(bar) => bar.suspend(f),
            None => f(),
        }
    }

    /// One step done.
    pub fn inc(&self) {
        if let Some(bar) = &self.bar {
            bar.inc(1);
        }
    }
}

impl Drop for Progress {
    /// Removes the bar from the terminal: the harness's results follow.
    fn drop(&mut self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// A terminal that records what is written to it.
    #[derive(Debug, Clone, Default)]
    struct Screen(Arc<Mutex<String>>);

    impl indicatif::TermLike for Screen {
        fn width(&self) -> u16 {
            100
        }
        fn move_cursor_up(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn move_cursor_down(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn move_cursor_right(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn move_cursor_left(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn write_line(&self, s: &str) -> std::io::Result<()> {
            self.write_str(&format!("{s}\n"))
        }
        fn write_str(&self, s: &str) -> std::io::Result<()> {
            self.0.lock().unwrap().push_str(s);
            Ok(())
        }
        fn clear_line(&self) -> std::io::Result<()> {
            Ok(())
        }
        fn flush(&self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_terminal_gets_step_k_of_n_with_the_time_left() {
        let screen = Screen::default();
        let p = Progress::on(
            3,
            "cell",
            Some(ProgressDrawTarget::term_like(Box::new(screen.clone()))),
        );
        assert!(p.is_drawn());
        p.inc();
        p.println("lfrt work=0 done");
        let text = screen.0.lock().unwrap().clone();
        assert!(text.contains("cell 1/3 "), "{text:?}");
        assert!(text.contains(" left"), "{text:?}");
        assert!(text.contains("lfrt work=0 done"), "{text:?}");
    }

    #[test]
    fn without_a_terminal_nothing_is_drawn() {
        let p = Progress::on(3, "cell", None);
        assert!(!p.is_drawn());
        p.inc();
        assert_eq!(p.suspend(|| 7), 7);
    }
}
