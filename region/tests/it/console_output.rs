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

/// The remote serial console (2.6+) through the region's proxy: the fake
/// driver's console echoes what it is sent. Tokens are checked by the
/// proxy and shown to admins (2.31+); other consoles and versions answer
/// as Nova's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_serial_console_through_the_proxy() {
    let (region, api, _dir) = start("remote_serial_console").await;
    let id = api.boot(&api.member, "con2").await;
    api.settle(&id).await;
    let path = format!("/v2.1/servers/{id}/remote-consoles");
    let serial = json!({"remote_console": {"protocol": "serial", "type": "serial"}});

    let r = api
        .call(&api.member, "2.5", "POST", &path, Some(serial.clone()))
        .await;
    assert_eq!(r.status, 404, "before 2.6: {}", r.body);
    let r = api
        .call(
            &api.member,
            "2.6",
            "POST",
            &path,
            Some(json!({"remote_console": {"protocol": "vnc", "type": "xvpvnc"}})),
        )
        .await;
    assert_eq!(r.status, 501, "{}", r.body);
    let r = api
        .call(
            &api.member,
            "2.6",
            "POST",
            &path,
            Some(json!({"remote_console": {"protocol": "serial", "type": "novnc"}})),
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.body);

    let r = api
        .call(&api.member, "2.6", "POST", &path, Some(serial.clone()))
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let url = r.body["remote_console"]["url"].as_str().unwrap().to_owned();
    assert_eq!(r.body["remote_console"]["type"], "serial");
    let proxy = region
        .compute
        .serial_proxy
        .expect("the region runs a proxy");
    assert!(url.starts_with(&format!("ws://{proxy}/?token=")), "{url}");
    let token = url.split("token=").nth(1).unwrap().to_owned();

    // Admins see where a token leads (2.31+); members may not look.
    let tpath = format!("/v2.1/os-console-auth-tokens/{token}");
    let r = api.call(&api.admin, "2.31", "GET", &tpath, None).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["console"]["instance_uuid"], id.as_str());
    assert!(r.body["console"]["port"].as_u64().unwrap() > 0);
    let r = api.call(&api.member, "2.31", "GET", &tpath, None).await;
    assert_eq!(r.status, 403, "{}", r.body);
    let r = api.call(&api.admin, "2.30", "GET", &tpath, None).await;
    assert_eq!(r.status, 400, "{}", r.body);
    let r = api
        .call(
            &api.admin,
            "2.31",
            "GET",
            "/v2.1/os-console-auth-tokens/nope",
            None,
        )
        .await;
    assert_eq!(r.status, 404, "{}", r.body);

    // Typed into the console through the proxy, answered.
    let echoed = tokio::task::spawn_blocking(move || {
        let (mut ws, _) = tungstenite::connect(url.as_str()).expect("upgrade");
        ws.send(tungstenite::Message::Binary(
            b"hello console\n".to_vec().into(),
        ))
        .unwrap();
        let mut got = String::new();
        while !got.contains("hello console") {
            match ws.read().expect("read") {
                tungstenite::Message::Binary(b) => got.push_str(&String::from_utf8_lossy(&b)),
                tungstenite::Message::Text(t) => got.push_str(t.as_str()),
                _ => {}
            }
        }
        got
    })
    .await
    .unwrap();
    assert!(echoed.starts_with("fake-console: "), "{echoed:?}");
    // A forged token: refused before any upgrade.
    let forged = format!("ws://{proxy}/?token={}", "0".repeat(64));
    let refused = ws_refusal(forged).await;
    assert_eq!(refused, 401);

    // The pre-2.6 action gives the same kind of URL.
    let r = api
        .act(
            &api.member,
            &id,
            json!({"os-getSerialConsole": {"type": "serial"}}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.body["console"]["url"]
        .as_str()
        .unwrap()
        .contains("?token="));
    // A stopped server's console is not ready.
    let r = api.act(&api.member, &id, json!({"os-stop": null})).await;
    assert_eq!(r.status, 202, "{}", r.body);
    api.settle(&id).await;
    let r = api
        .call(&api.member, "2.6", "POST", &path, Some(serial))
        .await;
    assert_eq!(r.status, 409, "{}", r.body);
    // Deleted, its tokens go with it: the proxy refuses the one that
    // still had minutes to live, and admins no longer see it.
    api.delete_and_wait(&id).await;
    let r = api.call(&api.admin, "2.31", "GET", &tpath, None).await;
    assert_eq!(r.status, 404, "{}", r.body);
    assert_eq!(
        ws_refusal(format!("ws://{proxy}/?token={token}")).await,
        401
    );
    region.shutdown().await;
}

/// The noVNC console (2.6+, and the older `os-getVNCConsole`) through the
/// region's noVNC proxy: Nova's URL, and over its WebSocket the guest's
/// VNC server greets as RFB 3.8 (the fake driver's). Each proxy takes its
/// own kind of token only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_vnc_console_through_the_novnc_proxy() {
    let (region, api, _dir) = start("remote_vnc_console").await;
    let id = api.boot(&api.member, "vnc1").await;
    api.settle(&id).await;
    let path = format!("/v2.1/servers/{id}/remote-consoles");
    let novnc = json!({"remote_console": {"protocol": "vnc", "type": "novnc"}});
    let r = api
        .call(&api.member, "2.6", "POST", &path, Some(novnc))
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["remote_console"]["protocol"], "vnc");
    assert_eq!(r.body["remote_console"]["type"], "novnc");
    let url = r.body["remote_console"]["url"].as_str().unwrap().to_owned();
    let proxy = region
        .compute
        .novnc_proxy
        .expect("the region runs a noVNC proxy");
    let prefix = format!("http://{proxy}/vnc_lite.html?path=%3Ftoken%3D");
    let token = url
        .strip_prefix(&prefix)
        .unwrap_or_else(|| panic!("{url} is not Nova's noVNC URL"))
        .to_owned();
    // What noVNC's page opens: the WebSocket at `path`.
    let ws_url = format!("ws://{proxy}/?token={token}");
    let greeting = tokio::task::spawn_blocking(move || {
        let (mut ws, _) = tungstenite::connect(ws_url.as_str()).expect("upgrade");
        let mut got = Vec::new();
        while got.len() < 12 {
            if let tungstenite::Message::Binary(b) = ws.read().expect("read") {
                got.extend_from_slice(&b);
            }
        }
        got
    })
    .await
    .unwrap();
    assert_eq!(greeting, b"RFB 003.008\n");

    // A serial token does not open the noVNC proxy, nor a noVNC token the
    // serial one.
    let serial = json!({"remote_console": {"protocol": "serial", "type": "serial"}});
    let r = api
        .call(&api.member, "2.6", "POST", &path, Some(serial))
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let serial_url = r.body["remote_console"]["url"].as_str().unwrap().to_owned();
    let serial_token = serial_url.split("token=").nth(1).unwrap().to_owned();
    let serial_proxy = region.compute.serial_proxy.expect("a serial proxy");
    for url in [
        format!("ws://{proxy}/?token={serial_token}"),
        format!("ws://{serial_proxy}/?token={token}"),
    ] {
        let refused = ws_refusal(url).await;
        assert_eq!(refused, 401);
    }

    // The pre-2.6 action.
    let r = api
        .act(
            &api.member,
            &id,
            json!({"os-getVNCConsole": {"type": "novnc"}}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["console"]["type"], "novnc");
    assert!(r.body["console"]["url"]
        .as_str()
        .unwrap()
        .starts_with(&prefix));
    let r = api
        .act(
            &api.member,
            &id,
            json!({"os-getVNCConsole": {"type": "spice"}}),
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.body);
    region.shutdown().await;
}

/// The HTTP status a proxy refuses a WebSocket upgrade to `url` with
/// (panics when the upgrade is accepted).
async fn ws_refusal(url: String) -> u16 {
    tokio::task::spawn_blocking(move || match tungstenite::connect(url.as_str()) {
        Err(tungstenite::Error::Http(r)) => r.status().as_u16(),
        other => panic!("{url} accepted: {:?}", other.map(|_| ())),
    })
    .await
    .unwrap()
}
