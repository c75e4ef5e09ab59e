//! A guest's console output: a call to the compute that runs it
//! (`get_console_output` on `compute.<host>` over the cell's bus), with
//! the answer's control characters replaced as Nova does.

use std::time::Duration;

use cell_mapping::CellMapping;
use fabric::bus::BusError;
use fabric::rpc::{self, code, method, RequestIds};

use crate::compute_api::error::{ApiError, ApiResult};
use crate::compute_api::App;

/// How long the compute may take to answer.
pub const CONSOLE_CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// The last `tail_lines` lines (0: all the compute keeps, at most 100 KiB)
/// of the console of instance `id` on `host` in `cell`.
pub async fn output(
    app: &App,
    cell: &CellMapping,
    host: &str,
    id: &str,
    tail_lines: u32,
    ids: &RequestIds,
) -> ApiResult<String> {
    let bus = app.cells.bus(cell).await?;
    let req = rpc::ConsoleOutputRequest {
        instance_uuid: id.to_owned(),
        tail_lines,
    };
    let res: Result<rpc::ConsoleOutput, _> = rpc::call(
        bus.as_ref(),
        &rpc::compute_queue(host),
        method::GET_CONSOLE_OUTPUT,
        &req,
        ids,
        CONSOLE_CALL_TIMEOUT,
    )
    .await;
    match res {
        Ok(o) => Ok(printable(&o.output)),
        Err(e) => Err(match e.remote_code() {
            Some(code::NOT_FOUND) => {
                ApiError::NotFound("Guest does not have a console available.".into())
            }
            Some(code::NOT_IMPLEMENTED) => ApiError::NotImplemented("Unable to get console".into()),
            _ => {
                if let rpc::RpcError::Bus(BusError::Timeout(_)) = &e {
                    tracing::warn!(instance = %id, host, "compute did not answer get_console_output in time");
                }
                ApiError::internal(format!("get_console_output on {host}: {e}"))
            }
        }),
    }
}

/// The output as Nova's API answers it: control characters other than
/// tab and newline (`[\x00-\x08\x0B-\x1F]`, carriage return included)
/// become `?`.
pub fn printable(s: &str) -> String {
    s.chars()
        .map(|c| match c {
            '\u{00}'..='\u{08}' | '\u{0B}'..='\u{1F}' => '?',
            c => c,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn control_characters_become_question_marks_as_novas() {
        assert_eq!(
            super::printable("a\tb\nc\r\u{1b}[0m\u{7f}"),
            "a\tb\nc??[0m\u{7f}"
        );
    }
}
