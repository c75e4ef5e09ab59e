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
