//! The operator flows through the real binary, on both backends: onboarding
//! from nothing to cell0 + two cells with hosts, a third cell, disabling,
//! deleting, every refusal with its exit code, nothing half-written.

use crate::common::*;

const NIL: &str = "00000000-0000-0000-0000-000000000000";

async fn count_cells(api: &str) -> i64 {
    let pool = cell_mapping::db::Pool::connect("test", api).await.unwrap();
    let n = scalar_i64(&pool, "SELECT COUNT(*) FROM cell_mappings").await;
    pool.close().await;
    n
}

async fn onboarding_and_refusals(be: Be, name: &str) {
    let Some(r) = region(name, be, 3).await else {
        return;
    };
    let api = r.api.as_str();
    let (c1db, c1mq) = (&r.cells[0].0, &r.cells[0].1);
    let (c2db, c2mq) = (&r.cells[1].0, &r.cells[1].1);
    let (c3db, c3mq) = (&r.cells[2].0, &r.cells[2].1);

    // Before any schema: a one-line error naming the problem, exit 255.
    let out = expect(cm(api, &["cell_v2", "list-cells"]), 255);
    assert!(out.is_empty());
    assert!(stderr(&cm(api, &["cell_v2", "list-cells"])).contains("has no schema"));

    // From nothing: API schema, cell0, two cells.
    let out = ok(api, &["api_db", "sync"]);
    assert!(out.starts_with("api: version"), "{out}");
    ok(
        api,
        &["cell_v2", "map-cell0", "--database-connection", &r.cell0],
    );
    assert!(ok(
        api,
        &["cell_v2", "map_cell0", "--database_connection", &r.cell0]
    )
    .contains("already setup"));
    let cell1 = ok(
        api,
        &[
            "cell_v2",
            "create-cell",
            "--name",
            "cell1",
            "--transport-url",
            c1mq,
            "--database-connection",
            c1db,
        ],
    );
    let cell1 = cell1.trim().to_owned();
    uuid::Uuid::parse_str(&cell1).expect("create-cell prints the UUID");
    // Upstream spellings work too.
    let cell2 = ok(
        api,
        &[
            "cell_v2",
            "create_cell",
            "--name",
            "cell2",
            "--transport-url",
            c2mq,
            "--database_connection",
            c2db,
            "--verbose",
        ],
    );
    let cell2 = cell2.trim().to_owned();

    // Hosts register in the cells; discovery maps them.
    let p1 = cell_pool(c1db).await;
    let p2 = cell_pool(c2db).await;
    for h in ["h1", "h2"] {
        add_compute(&p1, h).await;
    }
    add_compute(&p2, "h3").await;
    let out = ok(api, &["cell_v2", "discover-hosts", "--verbose"]);
    assert!(out.contains("Mapped host 'h1'"), "{out}");
    assert_eq!(
        host_mappings(api).await,
        vec![
            ("h1".to_owned(), cell1.clone()),
            ("h2".to_owned(), cell1.clone()),
            ("h3".to_owned(), cell2.clone())
        ]
    );
    expect(cm(api, &["cell_v2", "discover-hosts", "--strict"]), 1);
    let out = ok(api, &["cell_v2", "list-hosts", "--cell-uuid", &cell1]);
    assert!(
        out.contains("h1") && out.contains("h2") && !out.contains("h3"),
        "{out}"
    );

    // list-cells masks passwords unless --verbose.
    let out = ok(api, &["cell_v2", "list-cells"]);
    assert!(
        out.contains("cell0") && out.contains(&cell1) && out.contains(&cell2),
        "{out}"
    );
    if be == Be::Pg {
        assert!(
            out.contains("guest:****@") && !out.contains("guest:guest@"),
            "{out}"
        );
        assert!(ok(api, &["cell_v2", "list-cells", "--verbose"]).contains("guest:guest@"));
    }

    // create-cell refusals, nothing half-written.
    let before = count_cells(api).await;
    expect(
        cm(
            api,
            &[
                "cell_v2",
                "create-cell",
                "--transport-url",
                c1mq,
                "--database-connection",
                c3db,
            ],
        ),
        2,
    );
    expect(
        cm(
            api,
            &[
                "cell_v2",
                "create-cell",
                "--transport-url",
                c3mq,
                "--database-connection",
                c1db,
            ],
        ),
        2,
    );
    expect(
        cm(
            api,
            &[
                "cell_v2",
                "create-cell",
                "--name",
                "cell1",
                "--transport-url",
                c3mq,
                "--database-connection",
                c3db,
            ],
        ),
        2,
    );
    let err = stderr(&cm(
        api,
        &[
            "cell_v2",
            "create-cell",
            "--transport-url",
            "rabbit://u:pw@h/",
            "--database-connection",
            c3db,
        ],
    ));
    assert!(
        err.contains("invalid transport URL") && !err.contains("pw@"),
        "{err}"
    );
    expect(
        cm(
            api,
            &[
                "cell_v2",
                "create-cell",
                "--transport-url",
                "rabbit://u:pw@h/",
                "--database-connection",
                c3db,
            ],
        ),
        1,
    );
    expect(
        cm(
            api,
            &[
                "cell_v2",
                "create-cell",
                "--transport-url",
                c3mq,
                "--database-connection",
                "mysql://u:p@h/x",
            ],
        ),
        1,
    );
    expect(
        cm(api, &["cell_v2", "create-cell", "--transport-url", c3mq]),
        1,
    );
    let unreachable_db = match be {
        Be::Pg => "postgres://postgres:secret@127.0.0.1:1/nope".to_owned(),
        Be::Sqlite => "sqlite:///nonexistent/dir/x.sqlite".to_owned(),
    };
    let o = cm(
        api,
        &[
            "cell_v2",
            "create-cell",
            "--transport-url",
            c3mq,
            "--database-connection",
            &unreachable_db,
        ],
    );
    assert!(
        stderr(&o).contains("cannot migrate the cell database") && !stderr(&o).contains("secret"),
        "{}",
        stderr(&o)
    );
    expect(o, 1);
    let o = cm(
        api,
        &[
            "cell_v2",
            "create-cell",
            "--transport-url",
            "amqp://guest:secret@127.0.0.1:1/x",
            "--database-connection",
            c3db,
        ],
    );
    assert!(
        stderr(&o).contains("cannot reach the message broker") && !stderr(&o).contains("secret"),
        "{}",
        stderr(&o)
    );
    expect(o, 1);
    assert_eq!(
        count_cells(api).await,
        before,
        "a refusal wrote to the API database"
    );

    // update-cell: every upstream exit code.
    let unknown = uuid::Uuid::new_v4().to_string();
    expect(
        cm(
            api,
            &[
                "cell_v2",
                "update-cell",
                "--cell-uuid",
                &unknown,
                "--name",
                "x",
            ],
        ),
        1,
    );
    expect(
        cm(
            api,
            &[
                "cell_v2",
                "update-cell",
                "--cell-uuid",
                "not-a-uuid",
                "--name",
                "x",
            ],
        ),
        1,
    );
    expect(
        cm(
            api,
            &[
                "cell_v2",
                "update-cell",
                "--cell-uuid",
                &cell2,
                "--transport-url",
                "inproc://",
            ],
        ),
        2,
    );
    expect(
        cm(
            api,
            &[
                "cell_v2",
                "update-cell",
                "--cell-uuid",
                &cell2,
                "--transport-url",
                c1mq,
            ],
        ),
        3,
    );
    expect(
        cm(
            api,
            &[
                "cell_v2",
                "update-cell",
                "--cell-uuid",
                &cell2,
                "--disable",
                "--enable",
            ],
        ),
        4,
    );
    expect(
        cm(
            api,
            &["cell_v2", "update-cell", "--cell-uuid", NIL, "--disable"],
        ),
        5,
    );
    expect(
        cm(
            api,
            &[
                "cell_v2",
                "update-cell",
                "--cell-uuid",
                NIL,
                "--transport-url",
                c3mq,
            ],
        ),
        5,
    );
    ok(
        api,
        &[
            "cell_v2",
            "update-cell",
            "--cell-uuid",
            &cell2,
            "--name",
            "cell2b",
        ],
    );

    // Disabling: discovery skips the cell unless asked for it explicitly.
    ok(
        api,
        &["cell_v2", "update-cell", "--cell-uuid", &cell2, "--disable"],
    );
    assert!(ok(
        api,
        &["cell_v2", "update-cell", "--cell-uuid", &cell2, "--disable"]
    )
    .contains("already disabled"));
    assert!(ok(api, &["cell_v2", "list-cells"]).contains("True"));
    add_compute(&p2, "h4").await;
    ok(api, &["cell_v2", "discover-hosts"]);
    assert!(!host_mappings(api).await.iter().any(|(h, _)| h == "h4"));
    ok(
        api,
        &[
            "cell_v2",
            "discover-hosts",
            "--cell-uuid",
            &cell2,
            "--strict",
        ],
    );
    assert!(host_mappings(api)
        .await
        .contains(&("h4".to_owned(), cell2.clone())));
    ok(
        api,
        &["cell_v2", "update-cell", "--cell-uuid", &cell2, "--enable"],
    );
    expect(
        cm(api, &["cell_v2", "discover-hosts", "--cell-uuid", &unknown]),
        1,
    );

    // Instances: map-instances with its marker, verify-instance's codes.
    let live = add_instance(&p1, "h1", false).await;
    let gone = add_instance(&p1, "h1", true).await;
    expect(
        cm(
            api,
            &[
                "cell_v2",
                "map-instances",
                "--cell-uuid",
                &cell1,
                "--max-count",
                "0",
            ],
        ),
        127,
    );
    expect(
        cm(
            api,
            &[
                "cell_v2",
                "map-instances",
                "--cell-uuid",
                &cell1,
                "--max-count",
                "x",
            ],
        ),
        127,
    );
    expect(
        cm(
            api,
            &[
                "cell_v2",
                "map-instances",
                "--cell-uuid",
                &cell1,
                "--max-count",
                "1",
            ],
        ),
        1,
    );
    expect(cm(api, &["cell_v2", "verify-instance", "--uuid", &gone]), 1);
    expect(
        cm(
            api,
            &[
                "cell_v2",
                "map-instances",
                "--cell-uuid",
                &cell1,
                "--max-count",
                "1",
            ],
        ),
        1,
    );
    ok(
        api,
        &[
            "cell_v2",
            "map-instances",
            "--cell-uuid",
            &cell1,
            "--max-count",
            "1",
        ],
    );
    ok(
        api,
        &["cell_v2", "map-instances", "--cell-uuid", &cell1, "--reset"],
    );
    expect(
        cm(api, &["cell_v2", "map-instances", "--cell-uuid", &unknown]),
        255,
    );
    assert!(ok(api, &["cell_v2", "verify-instance", "--uuid", &live]).contains(&cell1));
    expect(
        cm(
            api,
            &["cell_v2", "verify-instance", "--uuid", &gone, "--quiet"],
        ),
        3,
    );
    expect(
        cm(api, &["cell_v2", "verify-instance", "--uuid", &unknown]),
        1,
    );
    let apipool = cell_mapping::db::Pool::connect("test", api).await.unwrap();
    let unscheduled = uuid::Uuid::new_v4().to_string();
    exec(
        &apipool,
        "INSERT INTO instance_mappings (instance_uuid, project_id) VALUES ($1, 'p1')",
        &[&unscheduled],
    )
    .await;
    expect(
        cm(api, &["cell_v2", "verify-instance", "--uuid", &unscheduled]),
        2,
    );
    exec(&p1, "DELETE FROM instances WHERE uuid = $1", &[&gone]).await;
    expect(cm(api, &["cell_v2", "verify-instance", "--uuid", &gone]), 4);

    // delete-host: codes 1-4, then success and rediscovery.
    expect(
        cm(
            api,
            &[
                "cell_v2",
                "delete-host",
                "--cell-uuid",
                &unknown,
                "--host",
                "h1",
            ],
        ),
        1,
    );
    expect(
        cm(
            api,
            &[
                "cell_v2",
                "delete-host",
                "--cell-uuid",
                &cell1,
                "--host",
                "nope",
            ],
        ),
        2,
    );
    expect(
        cm(
            api,
            &[
                "cell_v2",
                "delete-host",
                "--cell-uuid",
                &cell1,
                "--host",
                "h3",
            ],
        ),
        3,
    );
    expect(
        cm(
            api,
            &[
                "cell_v2",
                "delete-host",
                "--cell-uuid",
                &cell1,
                "--host",
                "h1",
            ],
        ),
        4,
    );
    ok(
        api,
        &[
            "cell_v2",
            "delete-host",
            "--cell-uuid",
            &cell1,
            "--host",
            "h2",
        ],
    );
    assert!(!host_mappings(api).await.iter().any(|(h, _)| h == "h2"));
    ok(api, &["cell_v2", "discover-hosts", "--strict"]);
    assert!(host_mappings(api)
        .await
        .contains(&("h2".to_owned(), cell1.clone())));

    // delete-cell: 1 unknown, 3 live instances (even with --force), 2 hosts.
    expect(
        cm(api, &["cell_v2", "delete-cell", "--cell-uuid", &unknown]),
        1,
    );
    expect(
        cm(
            api,
            &["cell_v2", "delete-cell", "--cell-uuid", &cell1, "--force"],
        ),
        3,
    );
    exec(&p1, "UPDATE instances SET deleted = TRUE", &[]).await;
    expect(
        cm(api, &["cell_v2", "delete-cell", "--cell-uuid", &cell1]),
        2,
    );

    // A third cell while the system runs; 4: only deleted instances' mappings.
    let cell3 = ok(
        api,
        &[
            "cell_v2",
            "create-cell",
            "--name",
            "cell3",
            "--transport-url",
            c3mq,
            "--database-connection",
            c3db,
        ],
    );
    let cell3 = cell3.trim().to_owned();
    let p3 = cell_pool(c3db).await;
    add_instance(&p3, "", true).await;
    ok(api, &["cell_v2", "map-instances", "--cell-uuid", &cell3]);
    expect(
        cm(api, &["cell_v2", "delete-cell", "--cell-uuid", &cell3]),
        4,
    );
    ok(
        api,
        &["cell_v2", "delete-cell", "--cell-uuid", &cell3, "--force"],
    );

    // --force removes hosts and deleted instances' mappings, unmaps the nodes.
    ok(
        api,
        &["cell_v2", "delete-cell", "--cell-uuid", &cell1, "--force"],
    );
    assert!(!host_mappings(api).await.iter().any(|(_, c)| *c == cell1));
    assert_eq!(
        scalar_i64(&p1, "SELECT COUNT(*) FROM compute_nodes WHERE mapped").await,
        0
    );

    // Deleting an empty cell.
    let empty = ok(
        api,
        &[
            "cell_v2",
            "create-cell",
            "--name",
            "empty",
            "--transport-url",
            c1mq,
            "--database-connection",
            c1db,
        ],
    );
    ok(
        api,
        &["cell_v2", "delete-cell", "--cell-uuid", empty.trim()],
    );

    // db sync / version over the API and every mapped cell.
    let out = ok(api, &["db", "sync"]);
    assert!(
        out.contains("api: version") && out.contains("cell cell0") && out.contains("cell cell2b"),
        "{out}"
    );
    // Progress: every line numbered out of the total, API first.
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    for (i, l) in lines.iter().enumerate() {
        assert!(l.starts_with(&format!("[{}/3] ", i + 1)), "{out}");
        assert!(l.ends_with(" ms)"), "{out}");
    }
    assert!(lines[0].starts_with("[1/3] api: version"), "{out}");
    let out = ok(api, &["db", "version"]);
    assert!(out.lines().count() == 3, "{out}");

    // simple-cell-setup on an already set-up region: cell0 kept, cell found.
    let out = ok(
        api,
        &[
            "cell_v2",
            "simple-cell-setup",
            "--transport-url",
            c2mq,
            "--database-connection",
            c2db,
        ],
    );
    assert!(out.contains("already setup"), "{out}");
    p1.close().await;
    p2.close().await;
    p3.close().await;
    apipool.close().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn onboarding_and_refusals_sqlite() {
    onboarding_and_refusals(Be::Sqlite, "flow_sqlite").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn onboarding_and_refusals_postgres() {
    onboarding_and_refusals(Be::Pg, "flow_pg").await;
}

async fn simple_setup(be: Be, name: &str) {
    let Some(r) = region(name, be, 1).await else {
        return;
    };
    let api = r.api.as_str();
    let (db, mq) = (&r.cells[0].0, &r.cells[0].1);
    if be == Be::Pg {
        // cell0's default database: the cell's name + _cell0 (must exist on PostgreSQL).
        testkit::postgres(&format!("{name}_c1_cell0"))
            .await
            .unwrap();
    }
    ok(api, &["api_db", "sync"]);
    // No host yet: upstream's exit 1, but cell0 and the cell exist.
    expect(
        cm(
            api,
            &[
                "cell_v2",
                "simple-cell-setup",
                "--transport-url",
                mq,
                "--database-connection",
                db,
            ],
        ),
        1,
    );
    let p = cell_pool(db).await;
    add_compute(&p, "s1").await;
    ok(
        api,
        &[
            "cell_v2",
            "simple_cell_setup",
            "--transport-url",
            mq,
            "--database-connection",
            db,
        ],
    );
    let hosts = host_mappings(api).await;
    assert_eq!(hosts.len(), 1, "{hosts:?}");
    let out = ok(api, &["cell_v2", "list-cells"]);
    assert!(out.contains("cell0") && out.contains("cell1"), "{out}");
    expect(
        cm(
            api,
            &["cell_v2", "simple-cell-setup", "--database-connection", db],
        ),
        1,
    );
    p.close().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn simple_cell_setup_sqlite() {
    simple_setup(Be::Sqlite, "simple_sqlite").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn simple_cell_setup_postgres() {
    simple_setup(Be::Pg, "simple_pg").await;
}

/// `discover-hosts --by-service`: maps hosts that have a compute service
/// but no compute node yet (upstream's ironic-style flow), leaves other
/// binaries and deleted services alone, and is idempotent (`--strict` then
/// exits 1, nothing new).
async fn by_service(be: Be, name: &str) {
    let Some(r) = region(name, be, 1).await else {
        return;
    };
    let api = r.api.as_str();
    let (db, mq) = (&r.cells[0].0, &r.cells[0].1);
    ok(api, &["api_db", "sync"]);
    let cell = ok(
        api,
        &[
            "cell_v2",
            "create-cell",
            "--name",
            "cell1",
            "--transport-url",
            mq,
            "--database-connection",
            db,
        ],
    )
    .trim()
    .to_owned();
    let p = cell_pool(db).await;
    let service = |host: &str, binary: &str, deleted: bool| {
        let (p, host, binary) = (&p, host.to_owned(), binary.to_owned());
        async move {
            exec(
                p,
                &format!(
                    "INSERT INTO services (uuid, host, \"binary\", topic, deleted) VALUES ($1, $2, $3, $4, {})",
                    if deleted { "TRUE" } else { "FALSE" }
                ),
                &[&uuid::Uuid::new_v4().to_string(), &host, &binary, &format!("{binary}-{host}")],
            )
            .await;
        }
    };
    service("svc1", "nova-compute", false).await;
    service("svc2", "nova-compute", false).await;
    service("cond1", "nova-conductor", false).await;
    service("gone1", "nova-compute", true).await;
    add_compute(&p, "node1").await;

    // By compute node: only node1 (no node exists for svc1/svc2).
    let out = ok(api, &["cell_v2", "discover-hosts", "--verbose"]);
    assert!(out.contains("Getting compute nodes"), "{out}");
    assert_eq!(
        host_mappings(api).await,
        vec![("node1".to_owned(), cell.clone())]
    );
    // By service: the two live compute services, not the conductor, not the deleted one.
    let out = ok(
        api,
        &["cell_v2", "discover-hosts", "--by-service", "--verbose"],
    );
    assert!(out.contains("Getting compute services"), "{out}");
    assert!(
        out.contains("Mapped host 'svc1'") && out.contains("Mapped host 'svc2'"),
        "{out}"
    );
    assert_eq!(
        host_mappings(api).await,
        vec![
            ("node1".to_owned(), cell.clone()),
            ("svc1".to_owned(), cell.clone()),
            ("svc2".to_owned(), cell.clone())
        ]
    );
    // Again: nothing new (upstream's --strict exit 1).
    expect(
        cm(
            api,
            &["cell_v2", "discover-hosts", "--by-service", "--strict"],
        ),
        1,
    );
    assert_eq!(host_mappings(api).await.len(), 3);
    p.close().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn discover_hosts_by_service_sqlite() {
    by_service(Be::Sqlite, "by_service_sqlite").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn discover_hosts_by_service_postgres() {
    by_service(Be::Pg, "by_service_pg").await;
}
