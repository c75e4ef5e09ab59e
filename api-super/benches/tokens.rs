//! Token benchmarks: validations per second on one core (what every API
//! request pays), signing alone, and token issue latency through the
//! identity service (password at the default argon2 cost, and re-scope
//! with the token method, which skips the password hash).
//!
//!     cargo bench -p api-super --bench tokens -- --warm-up-time 1 --measurement-time 3

use std::net::{IpAddr, Ipv4Addr};

use api_super::identity::service::{DomainRef, ScopeRequest, UserRef};
use api_super::identity::{BootstrapSpec, Identity, IdentityConfig};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use fabric::token::{now_ms, Claims, Named, ProjectScope, TokenSigner, TokenValidator};

fn claims() -> Claims {
    let n = |i: &str, name: &str| Named {
        id: i.into(),
        name: name.into(),
    };
    Claims {
        user: n("4b7b3bd2b2c64c5a9b5f0c3f1e7d9a10", "demo"),
        user_domain: n("default", "Default"),
        project: Some(ProjectScope {
            project: n("9f0c1e2d3c4b5a69788796a5b4c3d2e1", "demo"),
            domain: n("default", "Default"),
        }),
        roles: vec![
            n("0a1b2c3d4e5f60718293a4b5c6d7e8f9", "admin"),
            n("1a1b2c3d4e5f60718293a4b5c6d7e8f9", "member"),
            n("2a1b2c3d4e5f60718293a4b5c6d7e8f9", "reader"),
        ],
        methods: vec!["password".into()],
        issued_at_ms: now_ms(),
        expires_at_ms: now_ms() + 3_600_000,
        audit_id: "qVYDnPgtS3WjCPTNvG8bAw".into(),
        parent_audit_id: None,
    }
}

fn offline(c: &mut Criterion) {
    let signer = TokenSigner::from_seed("k1", &[3; 32]);
    let old = TokenSigner::from_seed("k0", &[4; 32]);
    let v = TokenValidator::new();
    v.set_keys(&[signer.public_key(), old.public_key()]);
    let token = signer.sign(&claims());
    let mut g = c.benchmark_group("tokens");
    g.throughput(Throughput::Elements(1));
    g.bench_function("validate", |b| {
        b.iter(|| v.validate(std::hint::black_box(&token)).unwrap())
    });
    g.bench_function("sign", |b| {
        b.iter(|| signer.sign(std::hint::black_box(&claims())))
    });
    g.finish();
    eprintln!("token length: {} bytes", token.len());
}

fn issue(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let dir = std::env::temp_dir().join(format!("tokens-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut cfg = IdentityConfig::default();
    cfg.database.connection = format!("sqlite://{}/identity.sqlite?mode=rwc", dir.display());
    let id = rt.block_on(async {
        let id = Identity::open(cfg).await.unwrap();
        id.bootstrap(&BootstrapSpec::admin("bench-password"))
            .await
            .unwrap();
        id
    });
    let user = UserRef::Name {
        name: "admin".into(),
        domain: DomainRef::Name("Default".into()),
    };
    let scope = ScopeRequest::ProjectName {
        name: "admin".into(),
        domain: DomainRef::Id("default".into()),
    };
    let src = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let mut g = c.benchmark_group("issue");
    g.sample_size(20);
    g.bench_function("password_argon2_default", |b| {
        b.to_async(&rt).iter(|| async {
            let u = id
                .check_password(&user, "bench-password".into(), src)
                .await
                .unwrap();
            id.issue(&u, &scope, vec!["password".into()], None)
                .await
                .unwrap()
        })
    });
    let (t, _) = rt.block_on(async {
        let u = id
            .check_password(&user, "bench-password".into(), src)
            .await
            .unwrap();
        id.issue(&u, &ScopeRequest::Unscoped, vec!["password".into()], None)
            .await
            .unwrap()
    });
    g.sample_size(50);
    g.bench_function("rescope_token_method", |b| {
        b.to_async(&rt).iter(|| async {
            let (parent, u) = id.user_of_token(&t).await.unwrap();
            id.issue(&u, &scope, vec!["token".into()], Some(&parent))
                .await
                .unwrap()
        })
    });
    g.finish();
    let _ = std::fs::remove_dir_all(dir);
}

criterion_group!(benches, offline, issue);
criterion_main!(benches);
