//! Server actions, instance actions, server metadata and tags on the
//! embedded default region (in process: identity, placement, one cell with
//! two fake hosts, the Compute API).

use std::time::{Duration, Instant};

use region::{Region, RegionConfig};
use serde_json::{json, Value};

pub(crate) const IMAGE: &str = "cirros-0.6.2-x86_64-disk";

pub(crate) struct Api {
    http: reqwest::Client,
    compute: String,
    pub(crate) member: String,
    pub(crate) admin: String,
}

pub(crate) struct Resp {
    pub(crate) status: u16,
    pub(crate) body: Value,
    request_id: String,
    location: Option<String>,
}

impl Api {
    pub(crate) async fn call(
        &self,
        token: &str,
        mv: &str,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> Resp {
        let url = format!("{}{path}", self.compute);
        let mut req = self
            .http
            .request(method.parse().expect("method"), &url)
            .header("x-auth-token", token)
            .header("openstack-api-version", format!("compute {mv}"));
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req
            .send()
            .await
            .unwrap_or_else(|e| panic!("{method} {url}: {e}"));
        let status = resp.status().as_u16();
        let header = |n: &str| {
            resp.headers()
                .get(n)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let request_id = header("x-openstack-request-id").unwrap_or_default();
        let location = header("location");
        let text = resp.text().await.expect("body");
        let body = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        };
        Resp {
            status,
            body,
            request_id,
            location,
        }
    }

    pub(crate) async fn boot(&self, token: &str, name: &str) -> String {
        let r = self
            .call(
                token,
                "2.1",
                "POST",
                "/v2.1/servers",
                Some(json!({"server": {"name": name, "flavorRef": "1", "imageRef": IMAGE}})),
            )
            .await;
        assert_eq!(r.status, 202, "boot {name}: {}", r.body);
        let id = r.body["server"]["id"].as_str().unwrap().to_owned();
        let (s, _) = self.settle(&id).await;
        assert_eq!(s["status"], "ACTIVE", "{s}");
        id
    }

    async fn show(&self, id: &str) -> Value {
        let r = self
            .call(
                &self.admin,
                "latest",
                "GET",
                &format!("/v2.1/servers/{id}"),
                None,
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.body);
        r.body["server"].clone()
    }

    /// Polls until no task runs and the status is settled; returns the
    /// server and every (status, task_state) seen.
    /// Deletes `id` and waits (up to 30 s) until it is gone (404).
    pub(crate) async fn delete_and_wait(&self, id: &str) {
        let path = format!("/v2.1/servers/{id}");
        let r = self.call(&self.member, "2.1", "DELETE", &path, None).await;
        assert_eq!(r.status, 204, "delete {id}: {}", r.body);
        let deadline = Instant::now() + Duration::from_secs(30);
        while self
            .call(&self.member, "2.1", "GET", &path, None)
            .await
            .status
            != 404
        {
            assert!(Instant::now() < deadline, "{id} not deleted");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub(crate) async fn settle(&self, id: &str) -> (Value, Vec<(String, String)>) {
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut seen: Vec<(String, String)> = Vec::new();
        loop {
            let s = self.show(id).await;
            let o = (
                s["status"].as_str().unwrap_or_default().to_owned(),
                s["OS-EXT-STS:task_state"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            );
            if seen.last() != Some(&o) {
                seen.push(o.clone());
            }
            if o.1.is_empty() && o.0 != "BUILD" {
                return (s, seen);
            }
            assert!(Instant::now() < deadline, "{id} did not settle: {seen:?}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    pub(crate) async fn act(&self, token: &str, id: &str, body: Value) -> Resp {
        self.call(
            token,
            "latest",
            "POST",
            &format!("/v2.1/servers/{id}/action"),
            Some(body),
        )
        .await
    }
}

pub(crate) async fn start(name: &str) -> (Region, Api, std::path::PathBuf) {
    let dir = testkit::temp_dir(name);
    let mut cfg = RegionConfig::default();
    cfg.region.data_dir = dir.clone();
    cfg.region.cells = 1;
    cfg.region.hosts_per_cell = 2;
    cfg.region.fake_spawn_latency_ms = 10;
    crate::ephemeral_ports(&mut cfg);
    let region = Region::start(&cfg, None).await.expect("start the region");
    let identity = format!("http://{}", region.identity.addr);
    let member = region::password_token(&identity, &region.member)
        .await
        .expect("member token")
        .0;
    let admin = region::password_token(&identity, &region.admin)
        .await
        .expect("admin token")
        .0;
    let api = Api {
        http: reqwest::Client::new(),
        compute: format!("http://{}", region.compute.addr),
        member,
        admin,
    };
    (region, api, dir)
}

fn conflict(r: &Resp, want: &str) {
    assert_eq!(r.status, 409, "{}", r.body);
    assert_eq!(r.body["conflictingRequest"]["code"], 409, "{}", r.body);
    let msg = r.body["conflictingRequest"]["message"]
        .as_str()
        .unwrap_or_default();
    assert_eq!(msg, want, "{}", r.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_actions_walk_task_states_and_record_instance_actions() {
    let (region, api, dir) = start("server_actions_walk").await;
    let hv = region.cells[0].hypervisor.clone();
    let id = api.boot(&api.member, "walker").await;
    let host = api.show(&id).await["OS-EXT-SRV-ATTR:host"]
        .as_str()
        .unwrap()
        .to_owned();
    // Every driver operation on this host takes a while: the task state of
    // each action is seen.
    hv.delay_spawns(&host, Duration::from_millis(300));

    // (body, task state seen while the driver works, final status, vm_state,
    // power_state, action name, compute event)
    let steps: Vec<(Value, &str, &str, &str, i64, &str, &str)> = vec![
        (
            json!({"os-stop": null}),
            "powering-off",
            "SHUTOFF",
            "stopped",
            4,
            "stop",
            "compute_stop_instance",
        ),
        (
            json!({"os-start": null}),
            "powering-on",
            "ACTIVE",
            "active",
            1,
            "start",
            "compute_start_instance",
        ),
        (
            json!({"reboot": {"type": "SOFT"}}),
            "reboot_started",
            "ACTIVE",
            "active",
            1,
            "reboot",
            "compute_reboot_instance",
        ),
        (
            json!({"reboot": {"type": "HARD"}}),
            "reboot_started_hard",
            "ACTIVE",
            "active",
            1,
            "reboot",
            "compute_reboot_instance",
        ),
        (
            json!({"pause": null}),
            "pausing",
            "PAUSED",
            "paused",
            3,
            "pause",
            "compute_pause_instance",
        ),
        (
            json!({"unpause": null}),
            "unpausing",
            "ACTIVE",
            "active",
            1,
            "unpause",
            "compute_unpause_instance",
        ),
        (
            json!({"suspend": null}),
            "suspending",
            "SUSPENDED",
            "suspended",
            7,
            "suspend",
            "compute_suspend_instance",
        ),
        (
            json!({"resume": null}),
            "resuming",
            "ACTIVE",
            "active",
            1,
            "resume",
            "compute_resume_instance",
        ),
        (
            json!({"rebuild": {"imageRef": IMAGE, "name": "rebuilt", "metadata": {"role": "web"}}}),
            "rebuild_spawning",
            "ACTIVE",
            "active",
            1,
            "rebuild",
            "compute_rebuild_instance",
        ),
    ];
    let mut request_ids = Vec::new();
    for (body, during, status, vm, power, action, event) in &steps {
        let r = api.act(&api.member, &id, body.clone()).await;
        assert_eq!(r.status, 202, "{body}: {}", r.body);
        let (s, seen) = api.settle(&id).await;
        assert!(
            seen.iter().any(|(_, t)| t == during),
            "{body}: {during} never seen in {seen:?}"
        );
        assert_eq!(s["status"], *status, "{body}: {s}");
        assert_eq!(s["OS-EXT-STS:vm_state"], *vm, "{body}: {s}");
        assert_eq!(s["OS-EXT-STS:power_state"], *power, "{body}: {s}");
        assert_eq!(
            hv.guest_power_state(&host, id.parse().unwrap()),
            Some(*power as i32)
        );
        request_ids.push((r.request_id.clone(), *action, *event));
        if *action == "rebuild" {
            assert_eq!(r.body["server"]["status"], "REBUILD", "{}", r.body);
            assert!(r.body["server"]["adminPass"].is_string(), "{}", r.body);
            assert_eq!(s["name"], "rebuilt");
            assert_eq!(s["metadata"], json!({"role": "web"}));
            assert!(seen.iter().any(|(st, _)| st == "REBUILD"), "{seen:?}");
        }
        if *during == "reboot_started" {
            assert!(seen.iter().any(|(st, _)| st == "REBOOT"), "{seen:?}");
        }
        if *during == "reboot_started_hard" {
            assert!(seen.iter().any(|(st, _)| st == "HARD_REBOOT"), "{seen:?}");
        }
    }

    // A rebuild checks the new image against the server's flavor (m1.tiny,
    // 512 MB), as Nova: an image needing 256 MB is fine, one needing 4 GB
    // is Nova's 400.
    let glance = format!("http://{}/v2/images", region.image.addr);
    for (min_ram, ok) in [(256, true), (4096, false)] {
        let img: Value = api
            .http
            .post(&glance)
            .header("x-auth-token", &api.member)
            .json(
                &json!({"name": format!("needs-{min_ram}"), "min_ram": min_ram,
                "disk_format": "qcow2", "container_format": "bare"}),
            )
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let image_id = img["id"].as_str().expect("image id").to_owned();
        let put = api
            .http
            .put(format!("{glance}/{image_id}/file"))
            .header("x-auth-token", &api.member)
            .header("content-type", "application/octet-stream")
            .body(vec![7u8; 1024])
            .send()
            .await
            .unwrap();
        assert_eq!(put.status().as_u16(), 204);
        let r = api
            .act(&api.member, &id, json!({"rebuild": {"imageRef": image_id}}))
            .await;
        if ok {
            assert_eq!(r.status, 202, "min_ram {min_ram}: {}", r.body);
            let (s, _) = api.settle(&id).await;
            assert_eq!(s["image"]["id"], image_id.as_str(), "{s}");
        } else {
            assert_eq!(r.status, 400, "min_ram {min_ram}: {}", r.body);
            assert_eq!(
                r.body["badRequest"]["message"],
                "Flavor's memory is too small for requested image."
            );
        }
    }

    // Wrong states: 409 in Nova's words.
    let r = api.act(&api.member, &id, json!({"os-start": null})).await;
    conflict(
        &r,
        &format!("Cannot 'start' instance {id} while it is in vm_state active"),
    );
    let r = api.act(&api.member, &id, json!({"unpause": null})).await;
    conflict(
        &r,
        &format!("Cannot 'unpause' instance {id} while it is in vm_state active"),
    );
    let r = api.act(&api.member, &id, json!({"resume": null})).await;
    conflict(
        &r,
        &format!("Cannot 'resume' instance {id} while it is in vm_state active"),
    );
    // While an action runs, another is refused on its task state.
    let r = api.act(&api.member, &id, json!({"os-stop": null})).await;
    assert_eq!(r.status, 202, "{}", r.body);
    let r = api.act(&api.member, &id, json!({"pause": null})).await;
    conflict(
        &r,
        &format!("Cannot 'pause' instance {id} while it is in task_state powering-off"),
    );
    api.settle(&id).await;
    let r = api.act(&api.member, &id, json!({"os-stop": null})).await;
    conflict(
        &r,
        &format!("Cannot 'stop' instance {id} while it is in vm_state stopped"),
    );
    let r = api
        .act(&api.member, &id, json!({"reboot": {"type": "SOFT"}}))
        .await;
    conflict(
        &r,
        &format!("Cannot 'reboot' instance {id} while it is in vm_state stopped"),
    );
    let r = api.act(&api.member, &id, json!({"os-start": null})).await;
    assert_eq!(r.status, 202, "{}", r.body);
    let r = api.act(&api.member, &id, json!({"os-stop": null})).await;
    conflict(
        &r,
        &format!("Cannot 'stop' instance {id} while it is in vm_state stopped"),
    );
    let (s, _) = api.settle(&id).await;
    assert_eq!(s["status"], "ACTIVE");
    let r = api.act(&api.member, &id, json!({"os-start": null})).await;
    conflict(
        &r,
        &format!("Cannot 'start' instance {id} while it is in vm_state active"),
    );

    // Bad bodies.
    for (body, msg) in [
        (json!({"reboot": {"type": "WARM"}}), "type"),
        (json!({"reboot": {}}), "'type' is a required property"),
        (
            json!({"shelve-me": null}),
            "There is no such action: shelve-me",
        ),
        (
            json!({"os-stop": null, "os-start": null}),
            "Malformed request body",
        ),
        (json!({"rebuild": {}}), "'imageRef' is a required property"),
        (
            json!({"rebuild": {"imageRef": IMAGE, "flavorRef": "1"}}),
            "'flavorRef' was unexpected",
        ),
    ] {
        let r = api.act(&api.member, &id, body.clone()).await;
        assert_eq!(r.status, 400, "{body}: {}", r.body);
        let m = r.body["badRequest"]["message"].as_str().unwrap_or_default();
        assert!(m.contains(msg), "{body}: {m}");
    }

    // Lock (2.73 reason): the owner's other actions and delete are refused,
    // an admin's are not.
    let r = api
        .act(
            &api.member,
            &id,
            json!({"lock": {"locked_reason": "maintenance"}}),
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.body);
    let lock_request = r.request_id.clone();
    let s = api.show(&id).await;
    assert_eq!(s["locked"], true, "{s}");
    assert_eq!(s["locked_reason"], "maintenance", "{s}");
    let old = api
        .call(
            &api.member,
            "2.8",
            "GET",
            &format!("/v2.1/servers/{id}"),
            None,
        )
        .await;
    assert!(old.body["server"].get("locked").is_none(), "{}", old.body);
    let at_2_9 = api
        .call(
            &api.member,
            "2.9",
            "GET",
            &format!("/v2.1/servers/{id}"),
            None,
        )
        .await;
    assert_eq!(at_2_9.body["server"]["locked"], true);
    assert!(at_2_9.body["server"].get("locked_reason").is_none());
    for body in [
        json!({"os-stop": null}),
        json!({"pause": null}),
        json!({"reboot": {"type": "HARD"}}),
        json!({"rebuild": {"imageRef": IMAGE}}),
    ] {
        let r = api.act(&api.member, &id, body.clone()).await;
        conflict(&r, &format!("Instance {id} is locked"));
    }
    let r = api
        .call(
            &api.member,
            "latest",
            "DELETE",
            &format!("/v2.1/servers/{id}"),
            None,
        )
        .await;
    conflict(&r, &format!("Instance {id} is locked"));
    let r = api
        .call(
            &api.member,
            "latest",
            "POST",
            &format!("/v2.1/servers/{id}/metadata"),
            Some(json!({"metadata": {"a": "b"}})),
        )
        .await;
    conflict(&r, &format!("Instance {id} is locked"));
    let r = api.act(&api.admin, &id, json!({"pause": null})).await;
    assert_eq!(r.status, 202, "an admin ignores the lock: {}", r.body);
    let (s, _) = api.settle(&id).await;
    assert_eq!(s["status"], "PAUSED");
    let r = api.act(&api.admin, &id, json!({"unpause": null})).await;
    assert_eq!(r.status, 202, "{}", r.body);
    api.settle(&id).await;
    let r = api.act(&api.member, &id, json!({"unlock": null})).await;
    assert_eq!(r.status, 202, "{}", r.body);
    let s = api.show(&id).await;
    assert_eq!(s["locked"], false, "{s}");
    assert!(s["locked_reason"].is_null(), "{s}");
    // Locked by an admin: the owner may not unlock (unlock_override).
    let r = api.act(&api.admin, &id, json!({"lock": null})).await;
    assert_eq!(r.status, 202, "{}", r.body);
    let r = api.act(&api.member, &id, json!({"unlock": null})).await;
    assert_eq!(r.status, 403, "{}", r.body);
    let r = api.act(&api.admin, &id, json!({"unlock": null})).await;
    assert_eq!(r.status, 202, "{}", r.body);

    // Instance actions: newest first, with the request ids of the calls.
    let list = |mv: &'static str, q: &'static str| {
        let api = &api;
        let id = id.clone();
        async move {
            api.call(
                &api.member,
                mv,
                "GET",
                &format!("/v2.1/servers/{id}/os-instance-actions{q}"),
                None,
            )
            .await
        }
    };
    let r = list("2.58", "").await;
    assert_eq!(r.status, 200, "{}", r.body);
    let actions = r.body["instanceActions"].as_array().unwrap().clone();
    let names: Vec<&str> = actions
        .iter()
        .map(|a| a["action"].as_str().unwrap())
        .collect();
    assert_eq!(names.last(), Some(&"create"), "{names:?}");
    assert_eq!(
        &names[..6],
        &["unlock", "lock", "unlock", "unpause", "pause", "lock"],
        "{names:?}"
    );
    assert!(names.contains(&"rebuild"), "{names:?}");
    // create, the nine steps, the rebuild onto the 256 MB image, stop and
    // start, then the six above.
    assert_eq!(names.len(), 1 + steps.len() + 1 + 2 + 6, "{names:?}");
    for a in &actions {
        assert_eq!(a["instance_uuid"], id.as_str());
        assert!(a["updated_at"].is_string(), "{a}");
        assert!(a["start_time"].is_string(), "{a}");
    }
    let lock = actions
        .iter()
        .find(|a| a["request_id"] == lock_request.as_str())
        .expect("the lock action has the call's request id");
    assert_eq!(lock["action"], "lock");
    let r = list("2.57", "").await;
    assert!(
        r.body["instanceActions"][0].get("updated_at").is_none(),
        "{}",
        r.body
    );

    // Each power action has its compute event, finished with Success.
    for (rid, action, event) in &request_ids {
        let path = format!("/v2.1/servers/{id}/os-instance-actions/{rid}");
        let r = api.call(&api.member, "2.84", "GET", &path, None).await;
        assert_eq!(r.status, 200, "{}", r.body);
        let a = &r.body["instanceAction"];
        assert_eq!(a["action"], *action, "{a}");
        let events = a["events"].as_array().unwrap();
        assert_eq!(events.len(), 1, "{a}");
        assert_eq!(events[0]["event"], *event, "{a}");
        assert_eq!(events[0]["result"], "Success", "{a}");
        assert!(events[0]["finish_time"].is_string(), "{a}");
        // A member sees hostId but neither host, traceback nor details.
        assert!(events[0]["hostId"].as_str().is_some_and(|h| !h.is_empty()));
        for k in ["host", "traceback", "details"] {
            assert!(events[0].get(k).is_none(), "{k} in {a}");
        }
        let admin = api.call(&api.admin, "2.84", "GET", &path, None).await;
        let ev = &admin.body["instanceAction"]["events"][0];
        assert_eq!(ev["host"], host.as_str(), "{ev}");
        assert!(
            ev.get("traceback").is_some() && ev.get("details").is_some(),
            "{ev}"
        );
    }
    // Before 2.51 a member gets no events.
    let (rid, _, _) = &request_ids[0];
    let r = api
        .call(
            &api.member,
            "2.50",
            "GET",
            &format!("/v2.1/servers/{id}/os-instance-actions/{rid}"),
            None,
        )
        .await;
    assert!(
        r.body["instanceAction"].get("events").is_none(),
        "{}",
        r.body
    );
    let r = api
        .call(
            &api.member,
            "2.84",
            "GET",
            &format!("/v2.1/servers/{id}/os-instance-actions/req-nope"),
            None,
        )
        .await;
    assert_eq!(r.status, 404, "{}", r.body);

    // Paging (2.58): limit, marker, next link; changes-since.
    let r = list("2.58", "?limit=3").await;
    let page1 = r.body["instanceActions"].as_array().unwrap().clone();
    assert_eq!(page1.len(), 3);
    let next = r.body["links"][0]["href"]
        .as_str()
        .expect("next link")
        .to_owned();
    assert!(
        next.contains(&format!(
            "marker={}",
            page1[2]["request_id"].as_str().unwrap()
        )),
        "{next}"
    );
    let q = next.split_once('?').unwrap().1;
    let r = api
        .call(
            &api.member,
            "2.58",
            "GET",
            &format!("/v2.1/servers/{id}/os-instance-actions?{q}"),
            None,
        )
        .await;
    let page2 = r.body["instanceActions"].as_array().unwrap().clone();
    assert_eq!(page2.len(), 3);
    assert_eq!(page2[0], actions[3]);
    let r = list("2.58", "?marker=req-missing").await;
    assert_eq!(r.status, 400, "{}", r.body);
    let r = list("2.58", "?limit=-1").await;
    assert_eq!(r.status, 400, "{}", r.body);
    let r = list("2.58", "?changes-since=2999-01-01T00:00:00Z").await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["instanceActions"], json!([]));
    let r = list("2.58", "?changes-since=yesterday").await;
    assert_eq!(r.status, 400, "{}", r.body);
    let r = list("2.58", "?changes-before=2999-01-01T00:00:00Z").await;
    assert_eq!(r.status, 400, "changes-before is 2.66: {}", r.body);
    let r = list("2.66", "?changes-before=2000-01-01T00:00:00Z").await;
    assert_eq!(r.body["instanceActions"], json!([]), "{}", r.body);

    // Another project's server is not found; so are its actions.
    let admins = api.boot(&api.admin, "admins").await;
    for (method, path, body) in [
        (
            "GET",
            format!("/v2.1/servers/{admins}/os-instance-actions"),
            None,
        ),
        (
            "POST",
            format!("/v2.1/servers/{admins}/action"),
            Some(json!({"os-stop": null})),
        ),
        (
            "POST",
            format!("/v2.1/servers/{admins}/action"),
            Some(json!({"lock": null})),
        ),
        ("GET", format!("/v2.1/servers/{admins}/metadata"), None),
    ] {
        let r = api.call(&api.member, "latest", method, &path, body).await;
        assert_eq!(r.status, 404, "{method} {path}: {}", r.body);
    }

    // A failing host: the action ends with its task cleared, the vm_state
    // unchanged (ERROR for a reboot), an Error event with a traceback and
    // a fault.
    hv.reset_host(&host);
    hv.fail_spawns(&host, "hypervisor on fire");
    let r = api.act(&api.member, &id, json!({"pause": null})).await;
    assert_eq!(r.status, 202, "{}", r.body);
    let pause_request = r.request_id.clone();
    let (s, _) = api.settle(&id).await;
    assert_eq!(s["status"], "ACTIVE", "{s}");
    assert!(s["OS-EXT-STS:task_state"].is_null(), "{s}");
    let path = format!("/v2.1/servers/{id}/os-instance-actions/{pause_request}");
    let r = api.call(&api.admin, "2.84", "GET", &path, None).await;
    let a = &r.body["instanceAction"];
    assert_eq!(a["message"], "Error", "{a}");
    let ev = &a["events"][0];
    assert_eq!(ev["event"], "compute_pause_instance", "{a}");
    assert_eq!(ev["result"], "Error", "{a}");
    assert!(
        ev["traceback"]
            .as_str()
            .unwrap_or_default()
            .contains("hypervisor on fire"),
        "{a}"
    );
    assert!(
        ev["details"]
            .as_str()
            .unwrap_or_default()
            .contains("hypervisor on fire"),
        "{a}"
    );
    let r = api.call(&api.member, "2.84", "GET", &path, None).await;
    assert_eq!(r.body["instanceAction"]["events"][0]["result"], "Error");
    assert!(r.body["instanceAction"]["events"][0]
        .get("traceback")
        .is_none());
    let r = api
        .act(&api.member, &id, json!({"reboot": {"type": "SOFT"}}))
        .await;
    assert_eq!(r.status, 202, "{}", r.body);
    let (s, _) = api.settle(&id).await;
    assert_eq!(s["status"], "ERROR", "{s}");
    assert!(
        s["fault"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("hypervisor on fire"),
        "{s}"
    );
    // A hard reboot is allowed from ERROR; on a healed host it recovers.
    hv.reset_host(&host);
    let r = api
        .act(&api.member, &id, json!({"reboot": {"type": "HARD"}}))
        .await;
    assert_eq!(r.status, 202, "{}", r.body);
    let (s, _) = api.settle(&id).await;
    assert_eq!(s["status"], "ACTIVE", "{s}");

    // forceDelete records a delete; the actions of a deleted server are
    // listed from 2.21 on.
    let r = api
        .act(&api.member, &id, json!({"forceDelete": null}))
        .await;
    assert_eq!(r.status, 202, "{}", r.body);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = api
            .call(
                &api.member,
                "latest",
                "GET",
                &format!("/v2.1/servers/{id}"),
                None,
            )
            .await;
        if r.status == 404 {
            break;
        }
        assert!(Instant::now() < deadline, "not deleted: {}", r.body);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let r = list("2.20", "").await;
    assert_eq!(r.status, 404, "{}", r.body);
    let r = list("2.21", "").await;
    assert_eq!(r.status, 200, "{}", r.body);
    let first = &r.body["instanceActions"][0];
    assert_eq!(first["action"], "delete", "{}", r.body);
    let rid = first["request_id"].as_str().unwrap();
    let r = api
        .call(
            &api.admin,
            "2.21",
            "GET",
            &format!("/v2.1/servers/{id}/os-instance-actions/{rid}"),
            None,
        )
        .await;
    assert_eq!(
        r.body["instanceAction"]["events"][0]["event"], "compute_terminate_instance",
        "{}",
        r.body
    );

    drop(region);
    std::fs::remove_dir_all(&dir).ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_metadata_and_tags() {
    let (region, api, dir) = start("server_metadata_tags").await;
    let id = api.boot(&api.member, "tagged").await;
    let m = |method: &'static str, path: String, body: Option<Value>| {
        let api = &api;
        async move { api.call(&api.member, "latest", method, &path, body).await }
    };
    let base = format!("/v2.1/servers/{id}/metadata");

    let r = m(
        "POST",
        base.clone(),
        Some(json!({"metadata": {"a": "1", "b": "2"}})),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body, json!({"metadata": {"a": "1", "b": "2"}}));
    let r = m("POST", base.clone(), Some(json!({"metadata": {"c": "3"}}))).await;
    assert_eq!(r.body, json!({"metadata": {"a": "1", "b": "2", "c": "3"}}));
    let r = m(
        "PUT",
        format!("{base}/a"),
        Some(json!({"meta": {"a": "x"}})),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body, json!({"meta": {"a": "x"}}));
    let r = m("GET", format!("{base}/a"), None).await;
    assert_eq!(r.body, json!({"meta": {"a": "x"}}));
    let r = m("GET", base.clone(), None).await;
    assert_eq!(r.body, json!({"metadata": {"a": "x", "b": "2", "c": "3"}}));
    let s = api.show(&id).await;
    assert_eq!(s["metadata"], json!({"a": "x", "b": "2", "c": "3"}));
    for (method, path, body, msg) in [
        (
            "PUT",
            format!("{base}/a"),
            json!({"meta": {"b": "x"}}),
            "Request body and URI mismatch",
        ),
        (
            "PUT",
            format!("{base}/a"),
            json!({"meta": {"a": "x", "b": "y"}}),
            "Request body contains too many items",
        ),
        (
            "POST",
            base.clone(),
            json!({"metadata": {"bad/key": "x"}}),
            "was unexpected",
        ),
        (
            "POST",
            base.clone(),
            json!({"metadata": {"": "x"}}),
            "was unexpected",
        ),
        (
            "POST",
            base.clone(),
            json!({"metadata": {"k": "v".repeat(256)}}),
            "too long",
        ),
        (
            "POST",
            base.clone(),
            json!({"metadata": {"k": 5}}),
            "is not of type 'string'",
        ),
        (
            "POST",
            base.clone(),
            json!({"meta": {}}),
            "'metadata' is a required property",
        ),
    ] {
        let r = m(method, path.clone(), Some(body.clone())).await;
        assert_eq!(r.status, 400, "{method} {path} {body}: {}", r.body);
        let got = r.body["badRequest"]["message"].as_str().unwrap_or_default();
        assert!(got.contains(msg), "{body}: {got}");
    }
    let k255 = "k".repeat(255);
    let r = m(
        "POST",
        base.clone(),
        Some(json!({"metadata": {k255.clone(): "v".repeat(255)}})),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    // More than 128 items: refused, nothing written.
    let many: serde_json::Map<String, Value> =
        (0..130).map(|i| (format!("m{i}"), json!("v"))).collect();
    let r = m("POST", base.clone(), Some(json!({"metadata": many}))).await;
    assert_eq!(r.status, 403, "{}", r.body);
    let r = m("GET", base.clone(), None).await;
    assert_eq!(
        r.body["metadata"].as_object().unwrap().len(),
        4,
        "{}",
        r.body
    );
    let r = m(
        "PUT",
        base.clone(),
        Some(json!({"metadata": {"only": "one"}})),
    )
    .await;
    assert_eq!(r.body, json!({"metadata": {"only": "one"}}));
    let r = m("DELETE", format!("{base}/only"), None).await;
    assert_eq!(r.status, 204, "{}", r.body);
    let r = m("DELETE", format!("{base}/only"), None).await;
    assert_eq!(r.status, 404, "{}", r.body);
    let r = m("GET", format!("{base}/only"), None).await;
    assert_eq!(r.status, 404, "{}", r.body);
    assert_eq!(
        r.body["itemNotFound"]["message"],
        "Metadata item was not found"
    );

    // Tags (2.26).
    let tags = format!("/v2.1/servers/{id}/tags");
    let r = api.call(&api.member, "2.25", "GET", &tags, None).await;
    assert_eq!(r.status, 404, "{}", r.body);
    let r = m(
        "PUT",
        tags.clone(),
        Some(json!({"tags": ["web", "db", "web"]})),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body, json!({"tags": ["db", "web"]}));
    let r = m("PUT", format!("{tags}/blue"), None).await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert!(r
        .location
        .unwrap_or_default()
        .ends_with(&format!("/servers/{id}/tags/blue")));
    let r = m("PUT", format!("{tags}/blue"), None).await;
    assert_eq!(r.status, 204, "{}", r.body);
    let r = m("GET", format!("{tags}/blue"), None).await;
    assert_eq!(r.status, 204);
    let r = m("GET", format!("{tags}/green"), None).await;
    assert_eq!(r.status, 404);
    let r = m("PUT", format!("{tags}/a,b"), None).await;
    assert_eq!(r.status, 400, "{}", r.body);
    let r = m("PUT", tags.clone(), Some(json!({"tags": ["x".repeat(61)]}))).await;
    assert_eq!(r.status, 400, "{}", r.body);
    let fifty_one: Vec<String> = (0..51).map(|i| format!("t{i}")).collect();
    let r = m("PUT", tags.clone(), Some(json!({ "tags": fifty_one }))).await;
    assert_eq!(r.status, 400, "{}", r.body);
    let s = api.show(&id).await;
    assert_eq!(s["tags"], json!(["blue", "db", "web"]), "{s}");
    let old = api
        .call(
            &api.member,
            "2.25",
            "GET",
            &format!("/v2.1/servers/{id}"),
            None,
        )
        .await;
    assert!(old.body["server"].get("tags").is_none());
    let r = m("DELETE", format!("{tags}/blue"), None).await;
    assert_eq!(r.status, 204);
    let r = m("DELETE", format!("{tags}/blue"), None).await;
    assert_eq!(r.status, 404);
    let r = m("GET", tags.clone(), None).await;
    assert_eq!(r.body, json!({"tags": ["db", "web"]}));
    let r = m("DELETE", tags.clone(), None).await;
    assert_eq!(r.status, 204);
    let r = m("GET", tags.clone(), None).await;
    assert_eq!(r.body, json!({"tags": []}));

    // Another project's server: 404.
    let admins = api.boot(&api.admin, "admins").await;
    for (method, path) in [
        ("GET", format!("/v2.1/servers/{admins}/metadata")),
        ("GET", format!("/v2.1/servers/{admins}/tags")),
        ("PUT", format!("/v2.1/servers/{admins}/tags/x")),
    ] {
        let r = m(method, path.clone(), None).await;
        assert_eq!(r.status, 404, "{method} {path}: {}", r.body);
    }
    // A stopped server still takes metadata; one with a task does not.
    let r = api.act(&api.member, &id, json!({"os-stop": null})).await;
    assert_eq!(r.status, 202);
    api.settle(&id).await;
    let r = m("POST", base.clone(), Some(json!({"metadata": {"z": "1"}}))).await;
    assert_eq!(r.status, 200, "{}", r.body);

    drop(region);
    std::fs::remove_dir_all(&dir).ok();
}
