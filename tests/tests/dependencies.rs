//! A library user compiles only what the job needs: a model crate, by default, compiles
//! neither the trainer nor the text pipeline (its pre-training is behind its `train` feature),
//! and no crate but xtask compiles the CLI's dependencies (the trainer keeps them behind its
//! `cli` feature).

/// The names of the crates in `krate`'s normal dependency tree, default features only (as a
/// project that adds the crate gets it).
fn dependency_tree(krate: &str) -> Vec<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let manifest = sesame_tests::fixtures_dir().join("../Cargo.toml");
    let out = std::process::Command::new(&cargo)
        .args(["tree", "--offline", "-e", "normal", "--prefix", "none", "-p", krate, "--manifest-path"])
        .arg(&manifest)
        .output()
        .expect("cargo runs");
    assert!(out.status.success(), "cargo tree -p {krate}: {}", String::from_utf8_lossy(&out.stderr));
    let tree: Vec<String> = String::from_utf8_lossy(&out.stdout).lines().filter_map(|l| l.split(' ').next()).map(str::to_string).collect();
    assert!(tree.len() > 10 && tree[0] == krate, "{krate}: {tree:?}");
    tree
}

#[test]
fn model_crates_and_layers_compile_neither_the_trainer_nor_the_text_pipeline_by_default() {
    let models = ["sesame-bert", "sesame-roberta", "sesame-albert", "sesame-electra", "sesame-unilm", "sesame-bart", "sesame-xlnet"];
    for krate in models.iter().chain(&["sesame-layers", "sesame-generate"]) {
        let tree = dependency_tree(krate);
        for unwanted in ["sesame-train", "sesame-text", "tokenizers", "plotters", "clap", "indicatif"] {
            assert!(!tree.iter().any(|c| c == unwanted), "{krate} depends on {unwanted} by default:\n{tree:?}");
        }
    }
}

#[test]
fn only_xtask_compiles_the_cli_dependencies() {
    for krate in ["sesame-text", "sesame-train", "sesame-pipelines"] {
        let tree = dependency_tree(krate);
        for cli in ["clap", "indicatif"] {
            assert!(!tree.iter().any(|c| c == cli), "{krate} depends on {cli}:\n{tree:?}");
        }
    }
}

/// The facade a user adds (`sesame`, every family by default) runs models: it compiles neither
/// the trainer, nor plotting, nor the CLI's crates, nor the server's.
#[test]
fn the_facade_compiles_no_trainer_plotting_cli_or_server() {
    let tree = dependency_tree("sesame");
    for family in ["sesame-bert", "sesame-bart", "sesame-xlnet", "sesame-pipelines"] {
        assert!(tree.iter().any(|c| c == family), "sesame does not depend on {family}:\n{tree:?}");
    }
    for unwanted in ["sesame-train", "sesame-serve", "plotters", "clap", "indicatif", "axum", "tokio"] {
        assert!(!tree.iter().any(|c| c == unwanted), "sesame depends on {unwanted} by default:\n{tree:?}");
    }
}
