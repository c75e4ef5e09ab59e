//! `os-getConsoleOutput` on the embedded region (fake hosts, whose
//! driver answers Nova's fake driver's three lines): the whole log or its
//! tail, Nova's schema for `length`, another project's server, and a
//! server that has no host yet.

use serde_json::json;

use crate::server_actions::start;

const WHOLE: &str = "FAKE CONSOLE OUTPUT\nANOTHER\nLAST LINE\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_output_is_the_logs_tail_as_nova_answers_it() {
    let (region, api, _dir) = start("console_output").await;
    let id = api.boot(&api.member, "con1").await;
    let (s, _) = api.settle(&id).await;
    assert_eq!(s["status"], "ACTIVE");

    for (body, want) in [
        (json!({"os-getConsoleOutput": {}}), WHOLE),
        (json!({"os-getConsoleOutput": null}), WHOLE),
        (json!({"os-getConsoleOutput": {"length": null}}), WHOLE),
        (json!({"os-getConsoleOutput": {"length": -1}}), WHOLE),
        (json!({"os-getConsoleOutput": {"length": 9}}), WHOLE),
        (
            json!({"os-getConsoleOutput": {"length": 2}}),
            "ANOTHER\nLAST LINE\n",
        ),
        (
            json!({"os-getConsoleOutput": {"length": "1"}}),
            "LAST LINE\n",
        ),
    ] {
        let r = api.act(&api.member, &id, body.clone()).await;
        assert_eq!(r.status, 200, "{body}: {}", r.body);
        assert_eq!(r.body["output"], want, "{body}");
    }

    for (body, msg) in [
        (
            json!({"os-getConsoleOutput": {"length": -2}}),
            "-2 is less than the minimum of -1",
        ),
        (
            json!({"os-getConsoleOutput": {"length": "x"}}),
            "does not match",
        ),
        (
            json!({"os-getConsoleOutput": {"length": 1.5}}),
            "is not of type",
        ),
        (
            json!({"os-getConsoleOutput": {"lines": 3}}),
            "'lines' was unexpected",
        ),
    ] {
        let r = api.act(&api.member, &id, body.clone()).await;
        assert_eq!(r.status, 400, "{body}: {}", r.body);
        let m = r.body["badRequest"]["message"].as_str().unwrap_or_default();
        assert!(m.contains(msg), "{body}: {m}");
    }

    // Another project's server is not found.
    let admins = api.boot(&api.admin, "admins").await;
    let r = api
        .act(&api.member, &admins, json!({"os-getConsoleOutput": {}}))
        .await;
    assert_eq!(r.status, 404, "{}", r.body);
    // The admin reads any server's.
    let r = api
        .act(
            &api.admin,
            &id,
            json!({"os-getConsoleOutput": {"length": 1}}),
        )
        .await;
    assert_eq!(r.body["output"], "LAST LINE\n", "{}", r.body);
    region.shutdown().await;
}
