//! Models by hub id: `sesame_layers::hub` finds a model in a cache written as huggingface_hub
//! writes it (blobs, snapshots of symlinks, refs), and finds exactly what huggingface_hub's own
//! `try_to_load_from_cache` finds, for branches, tags, commits, pull-request refs and misses.

use std::path::Path;

use sesame_layers::hub::{resolve_in, HubError};

const MAIN: &str = "1111111111111111111111111111111111111111";
const OLD: &str = "2222222222222222222222222222222222222222";

/// Write `repo` at `commit` into `cache` as `hf download` does: the file's bytes in
/// `blobs/<hash>`, a relative symlink to it in `snapshots/<commit>/`, the ref names in `refs/`.
fn put(cache: &Path, repo: &str, commit: &str, refs: &[&str], config: &str) {
    let folder = cache.join(format!("models--{}", repo.replace('/', "--")));
    let blob = format!("{:x}", config.len() * 7919 + commit.as_bytes()[0] as usize);
    std::fs::create_dir_all(folder.join("blobs")).unwrap();
    std::fs::write(folder.join("blobs").join(&blob), config).unwrap();
    let snapshot = folder.join("snapshots").join(commit);
    std::fs::create_dir_all(&snapshot).unwrap();
    std::os::unix::fs::symlink(Path::new("../../blobs").join(&blob), snapshot.join("config.json")).unwrap();
    for name in refs {
        let reference = folder.join("refs").join(name);
        std::fs::create_dir_all(reference.parent().unwrap()).unwrap();
        std::fs::write(reference, commit).unwrap();
    }
}

fn cache() -> sesame_tests::Scratch {
    let cache = sesame_tests::Scratch::path("hub-cache");
    put(&cache, "org/model", MAIN, &["main"], "{\"model_type\": \"bert\"}");
    put(&cache, "org/model", OLD, &["v1.0", "pr/3"], "{\"model_type\": \"bert\", \"old\": true}");
    put(&cache, "solo-name", MAIN, &["main"], "{}");
    // A repository with a ref but no snapshot yet (a download cut short).
    put(&cache, "org/partial", MAIN, &[], "{}");
    std::fs::create_dir_all(cache.join("models--org--partial/refs")).unwrap();
    std::fs::write(cache.join("models--org--partial/refs/main"), OLD).unwrap();
    cache
}

#[test]
fn the_lookup_finds_what_huggingface_hub_try_to_load_from_cache_finds() {
    let Some(python) = sesame_tests::python() else { return };
    let cache = cache();
    let ids = [
        ("org/model", "main"), ("org/model", "v1.0"), ("org/model", "pr/3"), ("org/model", MAIN), ("org/model", OLD),
        ("org/model", "v2"), ("org/missing", "main"), ("solo-name", "main"), ("org/partial", "main"),
    ];
    let script = format!(
        "import json, sys\nfrom huggingface_hub import try_to_load_from_cache\nfor repo, rev in {ids}:\n    \
         found = try_to_load_from_cache(repo, 'config.json', cache_dir=sys.argv[1], revision=rev)\n    \
         print(json.dumps(found if isinstance(found, str) else None))\n",
        ids = serde_json::to_string(&ids).unwrap()
    );
    let out = std::process::Command::new(&python).args(["-c", &script]).arg(&cache).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let theirs: Vec<Option<String>> = String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(theirs.len(), ids.len());
    let mut found = 0;
    for ((repo, revision), theirs) in ids.iter().zip(theirs) {
        let id = if *revision == "main" { repo.to_string() } else { format!("{repo}@{revision}") };
        let ours = match resolve_in(&id, &cache) {
            Ok(dir) => Some(dir.join("config.json").display().to_string()),
            Err(HubError::NotCached { .. }) => None,
            Err(e) => panic!("{id}: {e}"),
        };
        assert_eq!(ours, theirs, "{id}");
        found += ours.is_some() as usize;
    }
    assert_eq!(found, 6, "the cases cover hits and misses");
    // The snapshot's file is the blob's content, through the symlink.
    let old = resolve_in("org/model@v1.0", &cache).unwrap();
    assert!(std::fs::read_to_string(old.join("config.json")).unwrap().contains("\"old\""));
    std::fs::remove_dir_all(&cache).unwrap();
}
