//! The report as `lfrt doctor` prints it: one `STATUS TOPIC TEXT` line per finding in fixed
//! columns, each problem's `fix:` line indented under it.

use super::report::Report;
use std::fmt;

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for x in &self.findings {
            writeln!(f, "{:<4} {:<11} {}", x.status, x.topic, x.text)?;
            if let Some(fix) = &x.fix {
                writeln!(f, "     fix: {fix}")?;
            }
        }
        Ok(())
    }
}
