//! A build the agent cannot report (the conductor fails a step for a reason
//! other than "superseded") never stays in BUILD: the agent records a fault
//! naming its host and sets the instance to ERROR. A step the conductor
//! answers `Unavailable` (its database is briefly away) is not a failure:
//! the agent repeats it under the same key and the build goes on.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use compute::driver::fake::FakeHypervisor;
use compute::placement::InMemoryPlacement;
use compute::HostConfig;
use fabric::bus::inproc::InprocTransport;
use fabric::bus::Transport;
use fabric::rpc::{self, code, method, RequestIds, CONDUCTOR_QUEUE};
use prost::Message;

#[derive(Default)]
struct Seen {
    updates: Vec<rpc::InstanceUpdate>,
    faults: Vec<rpc::InstanceFault>,
}

/// A conductor that registers hosts but fails the first instance update
/// (the build's ACTIVE update) with `code`.
async fn failing_conductor(bus: Arc<dyn Transport>, code: &'static str) -> Arc<Mutex<Seen>> {
    let seen: Arc<Mutex<Seen>> = Arc::default();
    let mut sub = bus.consume(CONDUCTOR_QUEUE).await.unwrap();
    let s = seen.clone();
    tokio::spawn(async move {
        while let Some(d) = sub.recv().await {
            let env = d.envelope().clone();
            let reply = match env.method.as_str() {
                method::SERVICE_REGISTER => env.reply(
                    rpc::ServiceRecord {
                        id: 1,
                        ..Default::default()
                    }
                    .encode_to_vec(),
                ),
                method::COMPUTE_NODE_UPDATE => {
                    let n: rpc::ComputeNodeUpdate = env.decode_message().unwrap();
                    env.reply(
                        rpc::ComputeNodeRecord {
                            id: 1,
                            uuid: n.uuid,
                            mapped: false,
                        }
                        .encode_to_vec(),
                    )
                }
                method::INSTANCE_UPDATE => {
                    let u: rpc::InstanceUpdate = env.decode_message().unwrap();
                    let first = {
                        let mut g = s.lock().unwrap();
                        g.updates.push(u);
                        g.updates.len() == 1
                    };
                    if first {
                        env.error_reply(code, "database is locked")
                    } else {
                        env.reply(rpc::InstanceRecord::default().encode_to_vec())
                    }
                }
                method::INSTANCE_FAULT => {
                    s.lock().unwrap().faults.push(env.decode_message().unwrap());
                    env.reply(rpc::Ack::default().encode_to_vec())
                }
                _ => env.reply(Vec::new()),
            };
            let _ = d.reply(reply).await;
        }
    });
    seen
}

/// Starts host `name` on `bus` (fake hypervisor) and casts it the build of
/// a fresh m1.tiny instance; the host, its hypervisor and the instance.
async fn host_with_a_build(
    bus: &Arc<dyn Transport>,
    name: &str,
) -> (
    compute::HostHandle,
    FakeHypervisor,
    fabric::ids::InstanceUuid,
) {
    let hv = FakeHypervisor::automatic(Duration::ZERO);
    let host = compute::start_host(
        HostConfig::new(name),
        bus.clone(),
        hv.driver(name),
        Arc::new(InMemoryPlacement::new()),
    );
    tokio::time::timeout(Duration::from_secs(10), host.ready())
        .await
        .unwrap()
        .unwrap();
    let instance = fabric::ids::InstanceUuid::new_random();
    let build = rpc::BuildAndRunInstance {
        instance_uuid: instance.to_string(),
        request_id: "req-00000000-0000-4000-8000-000000000001".into(),
        global_request_id: "req-00000000-0000-4000-8000-000000000002".into(),
        flavor: Some(rpc::FlavorResources {
            vcpus: 1,
            memory_mb: 512,
            root_gb: 1,
            ..Default::default()
        }),
        image_ref: "cirros".into(),
        ..Default::default()
    };
    let ids = RequestIds {
        request_id: build.request_id.clone(),
        global_request_id: build.global_request_id.clone(),
    };
    rpc::cast(
        bus.as_ref(),
        &rpc::compute_queue(name),
        method::BUILD_AND_RUN_INSTANCE,
        &build,
        &ids,
        rpc::BUILD_CAST_TTL,
    )
    .await
    .unwrap();
    (host, hv, instance)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreportable_build_ends_in_error_with_a_fault() {
    let bus: Arc<dyn Transport> = Arc::new(InprocTransport::new());
    let seen = failing_conductor(bus.clone(), code::INTERNAL).await;
    let (host, _hv, instance) = host_with_a_build(&bus, "abandon-host").await;
    let instance = instance.to_string();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        {
            let g = seen.lock().unwrap();
            let errored = g.updates.iter().any(|u| {
                u.instance_uuid == instance
                    && u.vm_state.as_deref() == Some(rpc::vm_state::ERROR)
                    && u.task_state.as_ref().is_some_and(|t| t.value.is_none())
            });
            // The agent sets ERROR, then records the fault: wait for both.
            let faulted = g.faults.iter().any(|f| {
                f.instance_uuid == instance
                    && f.host == "abandon-host"
                    && f.message.contains("database is locked")
            });
            if errored && faulted {
                // The guest was never spawned (the first step failed).
                assert!(!g.updates.iter().any(|u| u
                    .task_state
                    .as_ref()
                    .and_then(|t| t.value.as_deref())
                    == Some(rpc::task_state::SPAWNING)));
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "after 10 s: set to ERROR {errored}, fault naming the host recorded {faulted}"
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_answered_unavailable_is_repeated_and_the_build_goes_on() {
    let bus: Arc<dyn Transport> = Arc::new(InprocTransport::new());
    let seen = failing_conductor(bus.clone(), code::UNAVAILABLE).await;
    let (host, hv, instance) = host_with_a_build(&bus, "unavailable-host").await;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while seen.lock().unwrap().updates.len() < 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "the refused update was never repeated"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Let a wrong follow-up (ERROR, a fault) arrive if there were one.
    tokio::time::sleep(Duration::from_millis(300)).await;
    {
        let g = seen.lock().unwrap();
        assert_eq!(g.updates.len(), 2, "{:?}", g.updates);
        let (first, repeat) = (&g.updates[0], &g.updates[1]);
        assert_eq!(first.vm_state.as_deref(), Some(rpc::vm_state::ACTIVE));
        assert!(!first.update_id.is_empty());
        assert_eq!(
            first, repeat,
            "the repeat is the same update under the same key"
        );
        assert!(g.faults.is_empty(), "{:?}", g.faults);
    }
    assert!(
        hv.driver("unavailable-host")
            .list()
            .unwrap()
            .contains(&instance),
        "the guest was destroyed"
    );
    host.shutdown().await;
}
