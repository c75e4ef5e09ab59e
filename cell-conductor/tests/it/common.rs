//! A cell in a test: conductor, fake computes, in-memory placement.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cell_conductor::db::instances::{InstanceRow, NewInstance};
use cell_conductor::placement::Resources;
use cell_conductor::{CellDb, ConductorOptions, Handle, InMemoryPlacement};
use compute::driver::fake::FakeHypervisor;
use compute::placement::InMemoryPlacement as ComputePlacement;
use compute::{HostConfig, HostHandle};
use fabric::bus::Transport;
use fabric::ids::{InstanceUuid, ProviderUuid, RequestId};
use fabric::rpc::{self, method, Alternate, BuildAndRunInstance, FlavorResources, RequestIds};

/// One cell under test.
pub struct Cell {
    pub bus: Arc<dyn Transport>,
    pub conductor: Handle,
    pub db: CellDb,
    pub placement: InMemoryPlacement,
    pub inventory: ComputePlacement,
    pub hv: FakeHypervisor,
    pub hosts: Vec<(HostHandle, ProviderUuid)>,
    /// Hosts whose agent was stopped ([`Cell::stop_host`]), with their node.
    pub stopped: Vec<(String, ProviderUuid)>,
}

pub fn flavor() -> FlavorResources {
    FlavorResources {
        name: "m1.small".into(),
        vcpus: 1,
        memory_mb: 512,
        root_gb: 1,
        ..Default::default()
    }
}

pub fn resources() -> Resources {
    let f = flavor();
    Resources {
        vcpus: f.vcpus,
        memory_mb: f.memory_mb,
        disk_gb: f.disk_gb(),
    }
}

impl Cell {
    /// A conductor on `db_url`/`bus`, and `hosts` fake computes `host1..`.
    pub async fn start(
        db_url: &str,
        bus: Arc<dyn Transport>,
        hv: FakeHypervisor,
        hosts: usize,
    ) -> Cell {
        Self::start_with(db_url, bus.clone(), bus, hv, hosts).await
    }

    /// As [`Cell::start`], the computes talking over `host_bus` (e.g. a
    /// wrapper of `bus` that loses some replies).
    pub async fn start_with(
        db_url: &str,
        bus: Arc<dyn Transport>,
        host_bus: Arc<dyn Transport>,
        hv: FakeHypervisor,
        hosts: usize,
    ) -> Cell {
        Self::start_tuned(db_url, bus, host_bus, hv, hosts, |_| {}).await
    }

    /// As [`Cell::start_with`], with the conductor's options changed by
    /// `tune` last (the healing's, say).
    pub async fn start_tuned(
        db_url: &str,
        bus: Arc<dyn Transport>,
        host_bus: Arc<dyn Transport>,
        hv: FakeHypervisor,
        hosts: usize,
        tune: impl FnOnce(&mut ConductorOptions),
    ) -> Cell {
        let placement = InMemoryPlacement::new();
        let mut o = ConductorOptions::new(db_url, bus.clone());
        o.placement = Arc::new(placement.clone());
        o.report_interval = Duration::from_millis(200);
        o.liveness_flush = Duration::from_millis(200);
        tune(&mut o);
        let conductor = cell_conductor::run_with(o).await.expect("conductor starts");
        let db = conductor.db().clone();
        let inventory = ComputePlacement::new();
        let mut handles = Vec::new();
        for i in 1..=hosts {
            let mut cfg = HostConfig::new(&format!("host{i}"));
            cfg.heartbeat_interval = Duration::from_millis(100);
            cfg.call_timeout = Duration::from_secs(10);
            let h = compute::start_host(
                cfg,
                host_bus.clone(),
                hv.driver(&format!("host{i}")),
                Arc::new(inventory.clone()),
            );
            handles.push(h);
        }
        let mut hosts = Vec::new();
        for h in handles {
            let node = tokio::time::timeout(Duration::from_secs(20), h.ready())
                .await
                .expect("host ready in time")
                .expect("host ready");
            hosts.push((h, node));
        }
        Cell {
            bus,
            conductor,
            db,
            placement,
            inventory,
            hv,
            hosts,
            stopped: Vec::new(),
        }
    }

    pub fn provider(&self, host: &str) -> ProviderUuid {
        self.hosts
            .iter()
            .map(|(h, p)| (h.host(), *p))
            .chain(self.stopped.iter().map(|(h, p)| (h.as_str(), *p)))
            .find(|(h, _)| *h == host)
            .map(|(_, p)| p)
            .expect("known host")
    }

    /// Stops the agent of `host` (its guests stay in the fake hypervisor);
    /// returns its node.
    pub async fn stop_host(&mut self, host: &str) -> ProviderUuid {
        let i = self
            .hosts
            .iter()
            .position(|(h, _)| h.host() == host)
            .expect("running host");
        let (h, node) = self.hosts.remove(i);
        h.shutdown().await;
        self.stopped.push((host.to_owned(), node));
        node
    }

    /// What the API layer does: instance row + claim + cast to `host`.
    pub async fn boot(&self, host: &str, alternates: &[&str]) -> (InstanceUuid, RequestIds) {
        let (uuid, ids, build) = self.land(host, alternates).await;
        self.cast_build(host, &build, &ids).await;
        (uuid, ids)
    }

    /// Casts `build` to `host`, as the super-conductor does.
    pub async fn cast_build(&self, host: &str, build: &BuildAndRunInstance, ids: &RequestIds) {
        rpc::cast(
            self.bus.as_ref(),
            &rpc::compute_queue(host),
            method::BUILD_AND_RUN_INSTANCE,
            build,
            ids,
            rpc::BUILD_CAST_TTL,
        )
        .await
        .expect("cast build");
    }

    /// The landing a boot starts with: the instance row on `host` (as the
    /// super-conductor writes it; the first build step is fenced on it)
    /// and the claim there; the build to cast, with `alternates`.
    pub async fn land(
        &self,
        host: &str,
        alternates: &[&str],
    ) -> (InstanceUuid, RequestIds, BuildAndRunInstance) {
        let uuid = InstanceUuid::new_random();
        let ids = RequestIds {
            request_id: RequestId::generate().to_string(),
            global_request_id: RequestId::generate().to_string(),
        };
        self.db
            .create_instance(&NewInstance {
                uuid,
                project_id: "p1".into(),
                user_id: "u1".into(),
                display_name: Some("vm".into()),
                flavor: flavor(),
                image_ref: "cirros".into(),
                host: Some(host.into()),
                node: Some(host.into()),
                request_id: Some((ids.request_id.clone(), ids.global_request_id.clone())),
            })
            .await
            .expect("create instance");
        self.placement.claim(uuid, self.provider(host), resources());
        let build = BuildAndRunInstance {
            instance_uuid: uuid.to_string(),
            request_id: ids.request_id.clone(),
            global_request_id: ids.global_request_id.clone(),
            flavor: Some(flavor()),
            image_ref: "cirros".into(),
            node: host.into(),
            alternates: alternates
                .iter()
                .map(|a| Alternate {
                    host: (*a).into(),
                    node: (*a).into(),
                    provider_uuid: self.provider(a).to_string(),
                })
                .collect(),
            project_id: "p1".into(),
            user_id: "u1".into(),
            attempt: 1,
            guest: None,
        };
        (uuid, ids, build)
    }

    /// A delete as the API makes it: the task state `deleting` (an
    /// instance already deleted is left so), then `terminate_instance`.
    pub async fn terminate(&self, uuid: InstanceUuid, host: &str) -> RequestIds {
        let deleting = rpc::InstanceUpdate {
            instance_uuid: uuid.to_string(),
            task_state: rpc::NullableString::set(rpc::task_state::DELETING),
            ..Default::default()
        };
        let set = rpc::call::<_, rpc::InstanceRecord>(
            self.bus.as_ref(),
            rpc::CONDUCTOR_QUEUE,
            method::INSTANCE_UPDATE,
            &deleting,
            &RequestIds::default(),
            Duration::from_secs(10),
        )
        .await;
        if let Err(e) = set {
            assert_eq!(e.remote_code(), Some(rpc::code::NOT_FOUND), "{e:?}");
        }
        self.cast_terminate(uuid, host).await
    }

    /// `terminate_instance` alone, whatever the instance's task state.
    pub async fn cast_terminate(&self, uuid: InstanceUuid, host: &str) -> RequestIds {
        let ids = RequestIds {
            request_id: RequestId::generate().to_string(),
            global_request_id: RequestId::generate().to_string(),
        };
        rpc::cast(
            self.bus.as_ref(),
            &rpc::compute_queue(host),
            method::TERMINATE_INSTANCE,
            &rpc::TerminateInstance {
                instance_uuid: uuid.to_string(),
                request_id: ids.request_id.clone(),
                global_request_id: ids.global_request_id.clone(),
            },
            &ids,
            rpc::BUILD_CAST_TTL,
        )
        .await
        .expect("cast terminate");
        ids
    }

    pub async fn instance(&self, uuid: InstanceUuid) -> InstanceRow {
        self.db
            .instance(uuid)
            .await
            .unwrap()
            .expect("instance exists")
    }

    /// Polls the instance until `done`, at most 20 s.
    pub async fn wait_for(
        &self,
        uuid: InstanceUuid,
        what: &str,
        done: impl Fn(&InstanceRow) -> bool,
    ) -> InstanceRow {
        self.wait_for_up_to(uuid, what, Duration::from_secs(20), done)
            .await
    }

    /// Polls the instance until `done`, at most `limit`.
    pub async fn wait_for_up_to(
        &self,
        uuid: InstanceUuid,
        what: &str,
        limit: Duration,
        done: impl Fn(&InstanceRow) -> bool,
    ) -> InstanceRow {
        let deadline = Instant::now() + limit;
        loop {
            let row = self.instance(uuid).await;
            if done(&row) {
                return row;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}: {row:?}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    pub async fn stop(self) {
        for (h, _) in self.hosts {
            h.shutdown().await;
        }
        self.conductor.shutdown().await;
        self.bus.close().await;
    }
}

/// Holds `uuid`'s row lock in a transaction of its own (COMMIT releases it).
pub async fn lock_row(url: &str, uuid: fabric::ids::InstanceUuid) -> sqlx::PgConnection {
    use sqlx::Connection;
    let mut lock = sqlx::PgConnection::connect(url).await.unwrap();
    sqlx::query("BEGIN").execute(&mut lock).await.unwrap();
    sqlx::query("SELECT 1 FROM instances WHERE uuid = $1 FOR UPDATE")
        .bind(uuid.to_string())
        .execute(&mut lock)
        .await
        .unwrap();
    lock
}

/// Waits until `n` sessions of the database wait on a lock. Watched from a
/// connection of its own: inside the lock's transaction, pg_stat_activity
/// would keep listing the sessions of its first read (a copy's connection
/// opened later would never show).
pub async fn lock_waiters(url: &str, n: i64) {
    let mut watch = <sqlx::PgConnection as sqlx::Connection>::connect(url)
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM pg_stat_activity \
             WHERE datname = current_database() AND wait_event_type = 'Lock'",
        )
        .fetch_one(&mut watch)
        .await
        .unwrap();
        if waiting == n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "never {n} waiting on a lock ({waiting} waiting)"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
