//! Power state follows the guest (`compute::power_sync`) through the real
//! conductor and cell database: a guest that stops by itself is seen as
//! stopped within the sync interval, and a stopped instance whose guest
//! runs again is powered off; a guest changed while an action holds the
//! instance is left to the action.

use std::time::{Duration, Instant};

use compute::driver::fake::FakeHypervisor;
use fabric::rpc::power_state;

use crate::common::Cell;
use crate::embedded::backends;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_that_stops_by_itself_is_seen_stopped_and_a_stopped_one_stays_off() {
    let (db, bus) = backends("power_sync_guest_stops_by_itself");
    let hv = FakeHypervisor::automatic(Duration::from_millis(1));
    hv.sync_power_states(Duration::from_millis(100));
    let cell = Cell::start(&db.url, bus, hv.clone(), 1).await;
    let (uuid, _) = cell.boot("host1", &[]).await;
    cell.wait_for(uuid, "active", |r| r.vm_state.as_deref() == Some("active"))
        .await;

    // The guest shuts itself down: STOPPED / SHUTDOWN without anyone asking.
    let t = Instant::now();
    assert!(hv.set_guest_power("host1", uuid, power_state::SHUTDOWN));
    let row = cell
        .wait_for_up_to(uuid, "stopped by itself", Duration::from_secs(5), |r| {
            r.vm_state.as_deref() == Some("stopped")
        })
        .await;
    assert_eq!(row.power_state, Some(i64::from(power_state::SHUTDOWN)));
    assert_eq!(row.task_state, None);
    eprintln!("seen stopped after {:?}", t.elapsed());

    // Started behind the cloud's back while stopped: powered off again.
    assert!(hv.set_guest_power("host1", uuid, power_state::RUNNING));
    let deadline = Instant::now() + Duration::from_secs(5);
    let driver = hv.driver("host1");
    while driver.power_state(uuid) != power_state::SHUTDOWN {
        assert!(
            Instant::now() < deadline,
            "the stopped instance's guest still runs"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let row = cell.instance(uuid).await;
    assert_eq!(row.vm_state.as_deref(), Some("stopped"));
    assert_eq!(row.power_state, Some(i64::from(power_state::SHUTDOWN)));

    // A task state in progress owns the instance: a change is left alone.
    sqlx::query("UPDATE instances SET task_state = 'powering-on' WHERE uuid = $1")
        .bind(uuid.to_string())
        .execute(&sqlx::SqlitePool::connect(&db.url).await.unwrap())
        .await
        .unwrap();
    assert!(hv.set_guest_power("host1", uuid, power_state::PAUSED));
    tokio::time::sleep(Duration::from_millis(600)).await;
    let row = cell.instance(uuid).await;
    assert_eq!(row.vm_state.as_deref(), Some("stopped"));
    assert_eq!(row.power_state, Some(i64::from(power_state::SHUTDOWN)));
    assert_eq!(driver.power_state(uuid), power_state::PAUSED);
    cell.stop().await;
}
