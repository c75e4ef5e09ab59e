//! kill-host faults (issue 31): a fault hook, the command that kills a
//! compute process of the deployment; checked in the scenario file and
//! reported as run. The kill itself, of a real process, is
//! `region::it distributed` (a URL target on the distributed deployment).

use loadtest::runner;
use loadtest::scenario::Scenario;

use crate::scenario::{parse_err, quiet, HEAD};

/// kill-host faults: a host and a command are required, the command
/// belongs to kill-host only, and a URL target takes no other fault.
#[test]
fn kill_host_faults_are_checked() {
    let phase = "[[phase]]\nkind = \"burst\"\nservers = 1\n";
    let ok = Scenario::parse(&format!(
        "{HEAD}{phase}[[fault]]\nkind = \"kill-host\"\ncell = \"cell1\"\nhost = \"h1\"\ncommand = [\"kill\", \"-9\", \"1\"]\nat_secs = 1.0\n"
    ))
    .unwrap();
    assert_eq!(ok.faults[0].kind, loadtest::scenario::FaultKind::KillHost);
    for (fault, want) in [
        (
            "kind = \"kill-host\"\ncell = \"cell1\"\nhost = \"h1\"\nat_secs = 1.0\n",
            "fault[0].command (a non-empty program and its arguments) is required",
        ),
        (
            "kind = \"kill-host\"\ncell = \"cell1\"\nhost = \"h1\"\ncommand = []\nat_secs = 1.0\n",
            "fault[0].command (a non-empty program and its arguments) is required",
        ),
        (
            "kind = \"kill-host\"\ncell = \"cell1\"\ncommand = [\"true\"]\nat_secs = 1.0\n",
            "fault[0].host is required for kill-host",
        ),
        (
            "kind = \"stop-host\"\ncell = \"cell1\"\ncommand = [\"true\"]\nat_secs = 1.0\n",
            "fault[0].command only applies to kind = \"kill-host\"",
        ),
        (
            "kind = \"kill-host\"\ncell = \"cell1\"\nhost = \"h1\"\ncommand = [\"true\"]\nat_secs = 1.0\nduration_secs = 2.0\n",
            "fault[0].duration_secs does not apply to stop-host or kill-host",
        ),
    ] {
        let e = parse_err(&format!("{HEAD}{phase}[[fault]]\n{fault}"));
        assert!(e.contains(want), "{e}");
    }
    let url = "name = \"t\"\n[target]\nkind = \"url\"\ncompute_url = \"http://127.0.0.1:1/v2.1\"\nidentity_url = \"http://127.0.0.1:1/v3\"\n";
    let e = parse_err(&format!(
        "{url}{phase}[[fault]]\nkind = \"stop-host\"\ncell = \"cell1\"\nat_secs = 1.0\n"
    ));
    assert!(
        e.contains("only kill-host faults apply to target.kind = \"url\""),
        "{e}"
    );
    Scenario::parse(&format!(
        "{url}{phase}[[fault]]\nkind = \"kill-host\"\ncell = \"cell7\"\nhost = \"h1\"\ncommand = [\"true\"]\nat_secs = 1.0\n"
    ))
    .expect("a URL target's cell names are labels");
}

/// A kill-host fault whose command fails is recorded as not applied (its
/// exit status and last line of stderr), and the run goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_kill_host_command_is_reported() {
    let data = testkit::temp_dir("loadtest_kill_host_data");
    let mut s = Scenario::parse(&format!(
        "{HEAD}[target]\npoll_interval_ms = 50\n[[phase]]\nkind = \"burst\"\nservers = 2\n\
         [[fault]]\nkind = \"kill-host\"\ncell = \"cell1\"\nhost = \"cell1-host01\"\n\
         command = [\"sh\", \"-c\", \"echo no such process >&2; exit 3\"]\nat_secs = 0.0\n"
    ))
    .unwrap();
    s.target.data_dir = Some(data.clone());
    let r = runner::run(&s, &quiet()).await.expect("run");
    let f = &r.faults[0];
    assert_eq!(f.target, "cell1-host01");
    assert!(
        f.result.starts_with("failed: sh exited with") && f.result.ends_with("no such process"),
        "{}",
        f.result
    );
    assert_eq!(f.noticed_after_secs, None);
    std::fs::remove_dir_all(&data).ok();
}
