//! The real `openstack` CLI (python-openstackclient, pinned) against the
//! identity service: `token issue`, `catalog list`, project/user/role
//! commands, as an admin and as a member.
//!
//! The CLI is installed with pip into a virtualenv in the user's cache
//! directory (`~/.cache/cells-osc-<version>`, reused across runs). Without
//! python3 or pip the test prints SKIP, or fails when
//! `REQUIRE_REAL_BACKENDS=1`.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

use crate::common::*;

const OSC_VERSION: &str = "7.4.0";

pub(crate) fn skip_or_panic(why: &str) {
    if testkit::backends_required() {
        panic!(
            "the openstack CLI is required ({}=1) but unavailable: {why}",
            testkit::REQUIRE_ENV
        );
    }
    eprintln!("SKIP: openstack CLI unavailable ({why})");
}

/// The `openstack` executable, installing it on first use.
pub(crate) fn openstack() -> Result<PathBuf, String> {
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")));
    let venv = cache.join(format!("cells-osc-{OSC_VERSION}"));
    let exe = venv.join("bin/openstack");
    if exe.exists() {
        return Ok(exe);
    }
    // One installer at a time across test processes.
    std::fs::create_dir_all(&cache).map_err(|e| e.to_string())?;
    let lock = cache.join(format!("cells-osc-{OSC_VERSION}.lock"));
    let mut waited = 0;
    while std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&lock)
        .is_err()
    {
        std::thread::sleep(std::time::Duration::from_secs(1));
        waited += 1;
        if exe.exists() {
            return Ok(exe);
        }
        if waited > 600 {
            let _ = std::fs::remove_file(&lock);
        }
    }
    let result = (|| {
        let ok = Command::new("python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .status()
            .map_err(|e| format!("python3: {e}"))?
            .success();
        if !ok {
            return Err("python3 -m venv failed".to_owned());
        }
        let out = Command::new(venv.join("bin/pip"))
            .args([
                "install",
                "-q",
                &format!("python-openstackclient=={OSC_VERSION}"),
            ])
            .output()
            .map_err(|e| format!("pip: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "pip install failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(exe.clone())
    })();
    let _ = std::fs::remove_file(&lock);
    if result.is_err() {
        let _ = std::fs::remove_dir_all(&venv);
    }
    result
}

struct Osc {
    exe: PathBuf,
    url: String,
}

impl Osc {
    /// Runs `openstack args…` as `user` on `project`; (success, stdout, stderr).
    fn run(&self, user: &str, pw: &str, project: &str, args: &[&str]) -> (bool, String, String) {
        let mut cmd = Command::new(&self.exe);
        for (k, _) in std::env::vars() {
            if k.starts_with("OS_") {
                cmd.env_remove(k);
            }
        }
        let out = cmd
            .args(args)
            .env("OS_AUTH_URL", format!("{}/v3", self.url))
            .env("OS_IDENTITY_API_VERSION", "3")
            .env("OS_USERNAME", user)
            .env("OS_PASSWORD", pw)
            .env("OS_PROJECT_NAME", project)
            .env("OS_USER_DOMAIN_NAME", "Default")
            .env("OS_PROJECT_DOMAIN_NAME", "Default")
            .env("OS_REGION_NAME", "RegionOne")
            .output()
            .expect("run openstack");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    fn json(&self, user: &str, pw: &str, project: &str, args: &[&str]) -> Value {
        let mut a = args.to_vec();
        a.extend(["-f", "json"]);
        let (ok, out, err) = self.run(user, pw, project, &a);
        assert!(ok, "openstack {args:?} as {user} failed:\n{err}\n{out}");
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("openstack {args:?}: {e}: {out}"))
    }
}

fn names(v: &Value, key: &str) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x[key].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openstack_cli_as_admin_and_member() {
    let exe = match tokio::task::spawn_blocking(openstack).await.unwrap() {
        Ok(e) => e,
        Err(why) => return skip_or_panic(&why),
    };
    let env = start("openstack_cli", |_| {}).await;
    let osc = Osc {
        exe,
        url: env.running.url(),
    };
    let (demo_user, demo_project) = env.boot.member.clone().unwrap();
    let admin_project = env.boot.admin_project_id.clone();
    tokio::task::spawn_blocking(move || {
        // Admin.
        let t = osc.json("admin", ADMIN_PW, "admin", &["token", "issue"]);
        assert_eq!(t["project_id"], admin_project.as_str());
        assert!(t["id"].as_str().unwrap().starts_with("e1."));
        let c = osc.json("admin", ADMIN_PW, "admin", &["catalog", "list"]);
        let mut types = names(&c, "Type");
        types.sort();
        assert_eq!(types, ["compute", "identity", "image", "placement"]);
        let p = osc.json("admin", ADMIN_PW, "admin", &["project", "list"]);
        let mut pn = names(&p, "Name");
        pn.sort();
        assert_eq!(pn, ["admin", "demo"]);
        osc.json(
            "admin",
            ADMIN_PW,
            "admin",
            &["project", "create", "--domain", "default", "cliproj"],
        );
        osc.json(
            "admin",
            ADMIN_PW,
            "admin",
            &[
                "user",
                "create",
                "--domain",
                "default",
                "--password",
                "clipw",
                "--project",
                "cliproj",
                "cliuser",
            ],
        );
        let (ok, _, err) = osc.run(
            "admin",
            ADMIN_PW,
            "admin",
            &[
                "role",
                "add",
                "--project",
                "cliproj",
                "--user",
                "cliuser",
                "member",
            ],
        );
        assert!(ok, "role add: {err}");
        let ra = osc.json(
            "admin",
            ADMIN_PW,
            "admin",
            &["role", "assignment", "list", "--names", "--user", "cliuser"],
        );
        assert_eq!(ra[0]["Role"], "member");
        assert_eq!(ra[0]["Project"], "cliproj@Default");
        let users = osc.json("admin", ADMIN_PW, "admin", &["user", "list"]);
        assert!(names(&users, "Name").contains(&"cliuser".to_owned()));
        let roles = osc.json("admin", ADMIN_PW, "admin", &["role", "list"]);
        assert!(names(&roles, "Name").contains(&"reader".to_owned()));
        // The new user logs in.
        let t = osc.json("cliuser", "clipw", "cliproj", &["token", "issue"]);
        assert!(t["user_id"].is_string());

        // Member.
        let t = osc.json("demo", MEMBER_PW, "demo", &["token", "issue"]);
        assert_eq!(t["project_id"], demo_project.as_str());
        assert_eq!(t["user_id"], demo_user.as_str());
        let c = osc.json("demo", MEMBER_PW, "demo", &["catalog", "list"]);
        assert_eq!(c.as_array().unwrap().len(), 4);
        let mine = osc.json(
            "demo",
            MEMBER_PW,
            "demo",
            &["project", "list", "--my-projects"],
        );
        assert_eq!(names(&mine, "Name"), ["demo"]);
        // A member may not list every project: our 403 makes the CLI fall
        // back to the member's own projects, as against upstream Keystone.
        let all = osc.json("demo", MEMBER_PW, "demo", &["project", "list"]);
        assert_eq!(names(&all, "Name"), ["demo"]);
        let (ok, _, err) = osc.run("demo", MEMBER_PW, "demo", &["user", "list"]);
        assert!(!ok && err.contains("403"), "member user list: {err}");
        // Wrong password: the CLI reports 401.
        let (ok, _, err) = osc.run("demo", "wrong", "demo", &["token", "issue"]);
        assert!(!ok && err.contains("401"), "{err}");
    })
    .await
    .unwrap();
}
