//! The fake driver's modes and knobs.

use std::time::Duration;

use compute::driver::fake::{FakeHypervisor, Mode};
use compute::driver::{DriverError, SpawnSpec};
use fabric::ids::InstanceUuid;
use fabric::rpc::power_state;

fn spec() -> SpawnSpec {
    SpawnSpec {
        instance: InstanceUuid::new_random(),
        flavor: Default::default(),
        image_ref: "cirros".into(),
        project_id: "p1".into(),
        guest: None,
    }
}

#[tokio::test]
async fn automatic_spawns_succeed_and_destroy_removes() {
    let hv = FakeHypervisor::automatic(Duration::from_millis(1));
    let d = hv.driver("h1");
    let s = spec();
    d.spawn(&s).await.unwrap();
    assert_eq!(d.power_state(s.instance), power_state::RUNNING);
    assert_eq!(d.list().unwrap(), vec![s.instance]);
    assert!(hv.guests("h2").is_empty());
    d.destroy(s.instance).await.unwrap();
    assert!(d.list().unwrap().is_empty());
    assert_eq!(d.power_state(s.instance), power_state::NOSTATE);
}

#[tokio::test]
async fn explicit_mode_waits_for_the_test() {
    let hv = FakeHypervisor::explicit();
    let d = hv.driver("h1");
    let (a, b) = (spec(), spec());
    let da = d.clone();
    let sa = a.clone();
    let ta = tokio::spawn(async move { da.spawn(&sa).await });
    let db = d.clone();
    let sb = b.clone();
    let tb = tokio::spawn(async move { db.spawn(&sb).await });
    assert_eq!(hv.spawn_requested(a.instance).await, "h1");
    assert_eq!(hv.spawn_requested(b.instance).await, "h1");
    assert!(hv.finish_spawn(b.instance, Err("nope".into())));
    assert_eq!(
        tb.await.unwrap(),
        Err(DriverError::SpawnFailed("nope".into()))
    );
    assert!(!ta.is_finished());
    assert!(hv.finish_spawn(a.instance, Ok(())));
    ta.await.unwrap().unwrap();
    assert_eq!(hv.guests("h1"), vec![a.instance]);
    assert!(
        !hv.finish_spawn(a.instance, Ok(())),
        "nothing waits any more"
    );
}

#[tokio::test]
async fn per_host_knobs_fail_or_delay() {
    let hv = FakeHypervisor::automatic(Duration::ZERO);
    hv.fail_spawns("bad", "host is broken");
    hv.delay_spawns("slow", Duration::from_millis(50));
    let err = hv.driver("bad").spawn(&spec()).await.unwrap_err();
    assert_eq!(err, DriverError::SpawnFailed("host is broken".into()));
    let t = std::time::Instant::now();
    hv.driver("slow").spawn(&spec()).await.unwrap();
    assert!(t.elapsed() >= Duration::from_millis(50));
    hv.reset_host("bad");
    hv.driver("bad").spawn(&spec()).await.unwrap();
    // Knobs apply in explicit mode too.
    hv.set_mode(Mode::Explicit);
    hv.fail_spawns("bad", "again");
    assert!(hv.driver("bad").spawn(&spec()).await.is_err());
}

#[tokio::test]
async fn a_failure_share_fails_about_that_share_of_spawns_and_counts_them() {
    let hv = FakeHypervisor::automatic(Duration::ZERO);
    hv.fail_spawn_share("h1", 0.3, "flaky");
    hv.fail_spawns("dead", "host is broken");
    let d = hv.driver("h1");
    let specs: Vec<SpawnSpec> = (0..1000).map(|_| spec()).collect();
    let mut failed = Vec::new();
    for s in &specs {
        match d.spawn(s).await {
            Ok(()) => {}
            Err(e) => {
                assert_eq!(e, DriverError::SpawnFailed("flaky".into()));
                failed.push(s.instance);
            }
        }
    }
    // 1,000 draws at 0.3: 300 expected, σ ≈ 14.5.
    assert!((230..=370).contains(&failed.len()), "{}", failed.len());
    assert_eq!(hv.guests("h1").len(), 1000 - failed.len());
    assert!(hv.driver("dead").spawn(&spec()).await.is_err());
    assert_eq!(hv.injected_failures(), failed.len() as u64 + 1);
    // The same instance draws the same on the same host, and again on
    // another host: some of the failed ones succeed there.
    let again = specs.iter().find(|s| s.instance == failed[0]).unwrap();
    assert!(d.spawn(again).await.is_err());
    hv.fail_spawn_share("h2", 0.3, "flaky");
    let mut ok_elsewhere = 0;
    for s in specs.iter().filter(|s| failed.contains(&s.instance)) {
        ok_elsewhere += usize::from(hv.driver("h2").spawn(s).await.is_ok());
    }
    assert!(ok_elsewhere > failed.len() / 2, "{ok_elsewhere}");
    // Share 0 never fails, 1 always.
    hv.fail_spawn_share("h3", 0.0, "never");
    hv.fail_spawn_share("h4", 1.0, "always");
    for s in specs.iter().take(50) {
        hv.driver("h3").spawn(s).await.unwrap();
        assert!(hv.driver("h4").spawn(s).await.is_err());
    }
}

#[tokio::test]
async fn power_operations_change_the_power_state_and_obey_the_knobs() {
    use compute::driver::GuestOp;
    let hv = FakeHypervisor::explicit();
    hv.set_mode(Mode::Automatic);
    let d = hv.driver("h1");
    let s = spec();
    d.spawn(&s).await.unwrap();
    for (op, want) in [
        (GuestOp::PowerOff, power_state::SHUTDOWN),
        (GuestOp::PowerOn, power_state::RUNNING),
        (GuestOp::Pause, power_state::PAUSED),
        (GuestOp::Unpause, power_state::RUNNING),
        (GuestOp::Suspend, power_state::SUSPENDED),
        (GuestOp::Resume, power_state::RUNNING),
        (GuestOp::PowerOff, power_state::SHUTDOWN),
        (GuestOp::Reboot { hard: true }, power_state::RUNNING),
        (
            GuestOp::Rebuild {
                image_ref: "other".into(),
            },
            power_state::RUNNING,
        ),
    ] {
        d.perform(s.instance, &op).await.unwrap();
        assert_eq!(d.power_state(s.instance), want, "{op:?}");
        assert_eq!(hv.guest_power_state("h1", s.instance), Some(want));
    }
    // A guest of another host (or none) is not found.
    let other = hv.driver("h2");
    assert_eq!(
        other.perform(s.instance, &GuestOp::Pause).await,
        Err(DriverError::NotFound(s.instance))
    );
    // The fail knob fails operations too, leaving the guest as it was.
    hv.fail_spawns("h1", "boom");
    let e = d.perform(s.instance, &GuestOp::PowerOff).await.unwrap_err();
    assert_eq!(
        e,
        DriverError::OperationFailed {
            op: "power_off",
            message: "boom".into()
        }
    );
    assert_eq!(d.power_state(s.instance), power_state::RUNNING);
    // The delay knob delays them.
    hv.reset_host("h1");
    hv.delay_spawns("h1", Duration::from_millis(150));
    let t = std::time::Instant::now();
    d.perform(s.instance, &GuestOp::Pause).await.unwrap();
    assert!(t.elapsed() >= Duration::from_millis(150));
}
