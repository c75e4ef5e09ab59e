//! Runs exactly the commands of docs/OPERATIONS.md's walkthrough (the fenced
//! `sh` blocks between the walkthrough markers, in one shell) against fresh
//! PostgreSQL databases and RabbitMQ vhosts, with compute nodes registered in
//! the cell databases as the computes would, then checks the region it built.

use std::process::Command;

use crate::common::*;

fn walkthrough() -> String {
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../docs/OPERATIONS.md"
    ))
    .expect("read docs/OPERATIONS.md");
    let start = doc
        .find("<!-- walkthrough:begin -->")
        .expect("begin marker");
    let end = doc.find("<!-- walkthrough:end -->").expect("end marker");
    let mut script = String::new();
    let mut in_block = false;
    for line in doc[start..end].lines() {
        if !in_block && line.trim_start().starts_with("```sh") {
            in_block = true;
        } else if in_block && line.trim_start().starts_with("```") {
            in_block = false;
        } else if in_block {
            script.push_str(line);
            script.push('\n');
        }
    }
    assert!(
        script.contains("create-cell"),
        "no commands found:\n{script}"
    );
    script
}

#[tokio::test(flavor = "multi_thread")]
async fn operations_walkthrough_postgres_rabbitmq() {
    let script = walkthrough();
    let Some(r) = region("docs_pg", Be::Pg, 3).await else {
        return;
    };
    // The computes of each cell register (cell databases migrated as
    // create-cell will do; migrating is idempotent).
    for (i, (db, _)) in r.cells.iter().enumerate() {
        let p = cell_pool(db).await;
        for h in 0..2 {
            add_compute(&p, &format!("cell{}-compute{h}", i + 1)).await;
        }
        p.close().await;
    }
    let dir = testkit::temp_dir("docs_pg_walkthrough");
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_cell-manage"))
        .parent()
        .unwrap()
        .to_owned();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new("bash")
        .args(["-euo", "pipefail", "-c", &script])
        .current_dir(&dir)
        .env("PATH", path)
        .env_remove("CELL_MANAGE_CONFIG")
        .env("API_DB", &r.api)
        .env("CELL0_DB", &r.cell0)
        .env("CELL1_DB", &r.cells[0].0)
        .env("CELL2_DB", &r.cells[1].0)
        .env("CELL3_DB", &r.cells[2].0)
        .env("CELL1_MQ", &r.cells[0].1)
        .env("CELL2_MQ", &r.cells[1].1)
        .env("CELL3_MQ", &r.cells[2].1)
        .output()
        .unwrap();
    let (so, se) = (stdout(&out), stderr(&out));
    assert!(
        out.status.success(),
        "walkthrough failed\nscript:\n{script}\nstdout:\n{so}\nstderr:\n{se}"
    );
    let hosts = host_mappings(&r.api).await;
    assert_eq!(hosts.len(), 6, "{hosts:?}");
    let cells: std::collections::BTreeSet<_> = hosts.iter().map(|(_, c)| c.clone()).collect();
    assert_eq!(cells.len(), 3);
    assert!(so.contains("cell0") && so.contains("cell3"), "{so}");
    assert!(
        !so.contains("guest:guest@"),
        "a password was printed:\n{so}"
    );
    let _ = std::fs::remove_dir_all(dir);
}
