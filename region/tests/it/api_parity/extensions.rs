//! `GET /extensions` and `/extensions/{alias}` (issue 37): the aliases
//! of what this region serves, in Nova's shape, for every project; an
//! unknown alias 404; unknown query parameters refused from 2.102.

use serde_json::Value;

use super::{call, region};

#[test]
fn openstack_cli_extensions_answer_as_nova() {
    let Some((_r, _admin, member)) = region("parity_extensions") else {
        return;
    };
    // The CLI lists them (`openstack extension list --compute`).
    let listed = member.json(&["extension", "list", "--compute"]);
    let aliases: Vec<&str> = listed
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(|e| e["Alias"].as_str())
        .collect();
    for want in [
        "os-hypervisors",
        "os-keypairs",
        "os-aggregates",
        "OS-EXT-STS",
    ] {
        assert!(aliases.contains(&want), "{want} missing: {listed}");
    }
    let answers = member.calls(vec![
        call("GET", "/v2.1/extensions/os-keypairs", Some("2.1"), None),
        call("GET", "/v2.1/extensions/os-networks", Some("2.1"), None),
        call("GET", "/v2.1/extensions?x=1", Some("2.101"), None),
        call("GET", "/v2.1/extensions?x=1", Some("2.102"), None),
        call("GET", "/v2/extensions", None, None),
    ]);
    let one = answers[0].json();
    let e = &one["extension"];
    assert_eq!(e["alias"], "os-keypairs", "{one}");
    assert_eq!(e["name"], "Keypairs", "{one}");
    assert_eq!(e["links"], Value::Array(vec![]), "{one}");
    assert_eq!(e["updated"], "2014-12-03T00:00:00Z", "{one}");
    answers[1].assert_error(404, "itemNotFound", "The resource could not be found.");
    assert_eq!(answers[2].status, 200, "{}", answers[2].text);
    answers[3].assert_error(
        400,
        "badRequest",
        "Additional properties are not allowed ('x' was unexpected)",
    );
    assert_eq!(answers[4].status, 200, "{}", answers[4].text);
    assert_eq!(
        answers[4].json()["extensions"].as_array().map(Vec::len),
        listed.as_array().map(Vec::len)
    );
}
