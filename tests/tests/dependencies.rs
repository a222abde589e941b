//! A library user compiles no CLI dependencies: the model crates' normal dependency trees hold
//! neither clap nor indicatif (the trainer keeps them behind its `cli` feature).

#[test]
fn model_crates_depend_on_nothing_cli_related() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let manifest = sesame_tests::fixtures_dir().join("../Cargo.toml");
    for krate in ["sesame-layers", "sesame-text", "sesame-train", "sesame-bert", "sesame-roberta", "sesame-albert", "sesame-electra", "sesame-unilm"] {
        let out = std::process::Command::new(&cargo)
            .args(["tree", "--offline", "-e", "normal", "--prefix", "none", "-p", krate, "--manifest-path"])
            .arg(&manifest)
            .output()
            .expect("cargo runs");
        assert!(out.status.success(), "cargo tree -p {krate}: {}", String::from_utf8_lossy(&out.stderr));
        let tree = String::from_utf8_lossy(&out.stdout);
        assert!(tree.lines().count() > 10, "{krate}: {tree}");
        for cli in ["clap ", "indicatif "] {
            assert!(!tree.lines().any(|l| l.starts_with(cli)), "{krate} depends on {cli}:\n{tree}");
        }
    }
}
