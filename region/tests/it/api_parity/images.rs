//! Nova's deprecated image proxies (issue 37), `/images` (to 2.35) and
//! `/images/{id}/metadata` (to 2.38), through openstacksdk's compute
//! image calls and raw ones: the image service's images in Nova's views,
//! its visibility and policy, Nova's errors.

use serde_json::{json, Value};

use super::{call, region, stdout_of, User, IMAGE};

/// Runs `script` with openstacksdk as `user` (connection `c`); its
/// standard output.
fn sdk(user: &User, script: &str) -> String {
    stdout_of(
        std::process::Command::new(user.bin.join("python"))
            .args([
                "-W",
                "ignore",
                "-c",
                &format!("import json, openstack\nc = openstack.connect()\n{script}"),
            ])
            .envs(user.env.iter().map(|(k, v)| (k.as_str(), v.as_str()))),
    )
}

#[test]
fn openstack_cli_image_proxy_answers_as_nova() {
    let Some((_r, admin, member)) = region("parity_image_proxy") else {
        return;
    };
    // openstacksdk's compute image calls (the proxy) see what the image
    // service holds, and write its properties.
    let out = sdk(
        &member,
        &format!(
            "imgs = list(c.compute.images(details=True))\n\
             i = [x for x in imgs if x.name == '{IMAGE}'][0]\n\
             one = c.compute.get_image(i.id)\n\
             print(json.dumps([len(imgs), one.name, one.status, one.progress, one.min_ram, one.size, i.id]))"
        ),
    );
    let v: Value = serde_json::from_str(out.trim()).expect("json");
    assert!(v[0].as_u64().unwrap() >= 1, "{v}");
    assert_eq!(v[1], IMAGE, "{v}");
    assert_eq!(v[2], "ACTIVE", "{v}");
    assert_eq!(v[3], 100, "{v}");
    let cirros = v[6].as_str().unwrap().to_owned();

    // The member's own image: its metadata through the proxy, then its
    // delete; the image service sees each change.
    let mine = member.json(&[
        "image",
        "create",
        "--disk-format",
        "raw",
        "--container-format",
        "bare",
        "--property",
        "auto_disk_config=true",
        "parity-mine",
    ])["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let meta = format!("/v2.1/images/{mine}/metadata");
    let answers = member.calls(vec![
        call("GET", format!("/v2.1/images/{mine}"), None, None),
        call(
            "POST",
            meta.clone(),
            None,
            Some(json!({"metadata": {"a": "1", "b": "2"}})),
        ),
        call(
            "PUT",
            format!("{meta}/a"),
            Some("2.38"),
            Some(json!({"meta": {"a": "9"}})),
        ),
        call("GET", format!("{meta}/a"), None, None),
        call("DELETE", format!("{meta}/b"), None, None),
        call(
            "PUT",
            format!("{meta}/a"),
            None,
            Some(json!({"meta": {"c": "1"}})),
        ),
        call("DELETE", format!("{meta}/nope"), None, None),
        call("GET", format!("{meta}/nope"), None, None),
        call("GET", meta.clone(), Some("2.39"), None),
        call("GET", meta.clone(), None, None),
    ]);
    let shown = answers[0].json();
    let img = &shown["image"];
    // The CLI uploads its (empty) data: active.
    assert_eq!(img["status"], "ACTIVE", "{shown}");
    assert_eq!(img["progress"], 100, "{shown}");
    assert_eq!(img["OS-EXT-IMG-SIZE:size"], 0, "{shown}");
    assert_eq!(img["OS-DCF:diskConfig"], "AUTO", "{shown}");
    assert_eq!(img["metadata"]["auto_disk_config"], "true", "{shown}");
    let rels: Vec<&str> = img["links"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["rel"].as_str().unwrap())
        .collect();
    assert_eq!(rels, ["self", "bookmark", "alternate"], "{shown}");
    assert_eq!(answers[1].status, 200, "{}", answers[1].text);
    assert_eq!(
        answers[1].json()["metadata"]["b"],
        "2",
        "{}",
        answers[1].text
    );
    assert_eq!(answers[2].json(), json!({"meta": {"a": "9"}}));
    assert_eq!(answers[3].json(), json!({"meta": {"a": "9"}}));
    assert_eq!(answers[4].status, 204, "{}", answers[4].text);
    answers[5].assert_error(400, "badRequest", "Request body and URI mismatch");
    answers[6].assert_error(404, "itemNotFound", "Invalid metadata key");
    assert_eq!(answers[7].status, 404, "{}", answers[7].text);
    assert_eq!(answers[8].status, 404, "{}", answers[8].text);
    let all = answers[9].json();
    assert_eq!(all["metadata"]["a"], "9", "{all}");
    assert_eq!(all["metadata"]["auto_disk_config"], "true", "{all}");
    assert!(all["metadata"].get("b").is_none(), "{all}");
    // The image service holds the same properties.
    let glance = member.json(&["image", "show", &mine]);
    assert_eq!(glance["properties"]["a"], "9", "{glance}");
    assert!(glance["properties"].get("b").is_none(), "{glance}");

    let answers = member.calls(vec![
        call("GET", "/v2.1/images?limit=1", None, None),
        call(
            "GET",
            format!("/v2.1/images/detail?name={IMAGE}"),
            None,
            None,
        ),
        call("GET", "/v2.1/images?minRam=999999", None, None),
        call("GET", "/v2.1/images?minRam=x", None, None),
        call(
            "GET",
            "/v2.1/images/6f1f6a4e-9a47-4c7e-8f0e-00000000dead",
            None,
            None,
        ),
        call("GET", "/v2.1/images", Some("2.36"), None),
        call("DELETE", format!("/v2.1/images/{cirros}"), None, None),
        call("DELETE", format!("/v2.1/images/{mine}"), Some("2.35"), None),
        call("GET", format!("/v2.1/images/{mine}"), None, None),
        call("GET", "/v2.1/os-networks", None, None),
        call("GET", "/v2.1/os-networks", Some("2.36"), None),
    ]);
    answers[9].assert_error(
        501,
        "notImplemented",
        "There is no network service in this region for the os-networks proxy.",
    );
    assert_eq!(answers[10].status, 404, "{}", answers[10].text);
    let page = answers[0].json();
    assert_eq!(page["images"].as_array().unwrap().len(), 1, "{page}");
    assert!(page["images"][0].get("minRam").is_none(), "{page}");
    let next = page["images_links"][0]["href"].as_str().unwrap_or_default();
    assert!(next.contains("limit=1&marker="), "{page}");
    let named = answers[1].json();
    let named = named["images"].as_array().unwrap();
    assert_eq!(named.len(), 1, "{named:?}");
    assert_eq!(named[0]["id"], json!(cirros));
    assert_eq!(answers[2].json(), json!({"images": []}));
    answers[3].assert_error(400, "badRequest", "Invalid minRam filter [x]");
    answers[4].assert_error(404, "itemNotFound", "Image not found.");
    assert_eq!(answers[5].status, 404, "{}", answers[5].text);
    answers[6].assert_error(403, "forbidden", "You are not allowed to delete the image.");
    assert_eq!(answers[7].status, 204, "{}", answers[7].text);
    answers[8].assert_error(404, "itemNotFound", "Image not found.");
    let (ok, _, _) = member.run(&["image", "show", &mine]);
    assert!(!ok, "the image service still has the deleted image");
    // The admin sees the same list.
    let all = admin.one(call("GET", "/v2.1/images", None, None));
    assert!(all.json()["images"]
        .as_array()
        .unwrap()
        .iter()
        .any(|i| i["id"] == json!(cirros)));
}
