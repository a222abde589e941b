//! Models named by HuggingFace hub id (`org/name[@revision]`), found in the local cache as
//! `huggingface_hub` lays it out, offline: what transformers, sentence-transformers and TEI
//! accept where Sesame takes a directory.
//!
//! The cache is `HF_HUB_CACHE`, else `HUGGINGFACE_HUB_CACHE`, else `HF_HOME/hub`, else
//! `XDG_CACHE_HOME/huggingface/hub`, else `~/.cache/huggingface/hub` (huggingface_hub's
//! `constants.HF_HUB_CACHE`). A model `org/name` lives in `models--org--name/`: `refs/<revision>`
//! holds the commit a branch or tag points to, `snapshots/<commit>/` the files (symlinks into
//! `blobs/`). [`resolve`] gives that snapshot directory, the one `try_to_load_from_cache`
//! reads each file from.

use std::path::{Path, PathBuf};

/// Why a model could not be found.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum HubError {
    /// A name that is neither a directory nor a valid hub id.
    #[error("{model}: no such directory, and not a hub id (org/name[@revision]): {reason}")]
    BadId { model: String, reason: String },
    /// A valid id with no snapshot in the cache.
    #[error("{model}: no such directory, and not in the HuggingFace cache (looked for {tried}); fetch it with `hf download {repo}{revision_flag}`, or set HF_HUB_CACHE to the cache that holds it")]
    NotCached { model: String, repo: String, revision_flag: String, tried: String },
}

/// A hub id: the repository and the revision (a branch, tag or commit; `main` by default).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HubId {
    /// `org/name` or `name`.
    pub repo: String,
    /// `main` unless the id ends in `@revision`.
    pub revision: String,
}

impl HubId {
    /// Parse `org/name[@revision]`, checked as huggingface_hub's `validate_repo_id` checks a
    /// repository id (at most 96 characters of letters, digits, `_`, `-` and `.`, one `/`, no
    /// `--` or `..`, each part starting and ending with a letter, digit or `_`), and the revision
    /// as a relative path of such parts: nothing that leaves the cache.
    pub fn parse(model: &str) -> Result<Self, String> {
        let (repo, revision) = match model.split_once('@') {
            Some((repo, revision)) => (repo, revision),
            None => (model, "main"),
        };
        if repo.is_empty() || repo.chars().count() > 96 {
            return Err("a repository id has 1 to 96 characters".into());
        }
        if repo.contains("--") || repo.contains("..") {
            return Err("a repository id has no `--` or `..`".into());
        }
        if repo.ends_with(".git") {
            return Err("a repository id does not end in `.git`".into());
        }
        let parts: Vec<&str> = repo.split('/').collect();
        if parts.len() > 2 {
            return Err("a repository id is `name` or `org/name`".into());
        }
        for part in &parts {
            check_part(part, "a repository id")?;
        }
        if revision.is_empty() || revision.starts_with('/') {
            return Err(format!("revision `{revision}`: not a branch, tag or commit"));
        }
        for part in revision.split('/') {
            if part == "." || part == ".." {
                return Err(format!("revision `{revision}`: `{part}` would leave the cache"));
            }
            if !part.chars().all(|c| c.is_alphanumeric() || "_-.".contains(c)) || part.is_empty() {
                return Err(format!("revision `{revision}`: not a branch, tag or commit"));
            }
        }
        Ok(HubId { repo: repo.to_string(), revision: revision.to_string() })
    }

    /// The repository's folder in `cache`: `models--org--name`.
    pub fn folder(&self, cache: &Path) -> PathBuf {
        cache.join(format!("models--{}", self.repo.replace('/', "--")))
    }

    /// The snapshot directory of this id in `cache`, as `try_to_load_from_cache` finds it:
    /// `refs/<revision>` names the commit when it exists, else the revision is the commit.
    /// `Err` lists the paths looked at.
    pub fn snapshot(&self, cache: &Path) -> Result<PathBuf, Vec<PathBuf>> {
        let folder = self.folder(cache);
        let reference = folder.join("refs").join(&self.revision);
        let mut commit = self.revision.clone();
        if reference.is_file() {
            // huggingface_hub writes the hash without a newline; one added by hand is allowed.
            commit = std::fs::read_to_string(&reference).map(|c| c.trim().to_string()).unwrap_or_default();
        }
        let snapshots = folder.join("snapshots");
        // A reference or revision is one name in snapshots/, never a path out of it.
        let snapshot = snapshots.join(&commit);
        let one_name = !commit.is_empty() && commit != "." && commit != ".." && !commit.contains('/') && !commit.contains('\\');
        if one_name && snapshot.is_dir() {
            return Ok(snapshot);
        }
        Err(if reference.is_file() { vec![reference, snapshot] } else { vec![reference, snapshots.join(&self.revision)] })
    }
}

/// One part of an id: word characters, `-` and `.`, starting and ending with a word character.
fn check_part(part: &str, what: &str) -> Result<(), String> {
    let word = |c: char| c.is_alphanumeric() || c == '_';
    let (Some(first), Some(last)) = (part.chars().next(), part.chars().last()) else {
        return Err(format!("{what} has no empty part"));
    };
    if !part.chars().all(|c| word(c) || c == '-' || c == '.') {
        return Err(format!("`{part}`: only letters, digits, `_`, `-` and `.`"));
    }
    if !word(first) || !word(last) {
        return Err(format!("`{part}`: starts and ends with a letter, digit or `_`"));
    }
    Ok(())
}

/// The hub cache directory, from the environment as huggingface_hub reads it.
pub fn cache_dir() -> PathBuf {
    let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty()).map(|v| expand_home(Path::new(&v)));
    if let Some(dir) = var("HF_HUB_CACHE").or_else(|| var("HUGGINGFACE_HUB_CACHE")) {
        return dir;
    }
    let home = var("HF_HOME").unwrap_or_else(|| {
        let cache = var("XDG_CACHE_HOME").unwrap_or_else(|| expand_home(Path::new("~/.cache")));
        cache.join("huggingface")
    });
    home.join("hub")
}

/// `~/x` with the home directory.
fn expand_home(path: &Path) -> PathBuf {
    match (path.strip_prefix("~"), std::env::var_os("HOME")) {
        (Ok(rest), Some(home)) => Path::new(&home).join(rest),
        _ => path.to_path_buf(),
    }
}

/// The directory `model` names: `model` itself when it is a path that exists, else the hub id's
/// snapshot in the cache ([`cache_dir`]).
///
/// A name that is not a hub id, or whose first part is a directory here (`runs/spam` when
/// `runs/` exists), is a path: it is returned as it is, and the loader then names what is
/// missing, as for any directory.
pub fn resolve(model: &str) -> Result<PathBuf, HubError> {
    resolve_in(model, &cache_dir())
}

/// [`resolve`] of a path argument: an existing path as it is, else its text as a hub id (a
/// path that is not UTF-8 is returned as it is).
pub fn resolve_path(model: &Path) -> Result<PathBuf, HubError> {
    match model.to_str() {
        Some(text) if !model.exists() => resolve(text),
        _ => Ok(model.to_path_buf()),
    }
}

/// [`resolve`] with an explicit cache directory.
pub fn resolve_in(model: &str, cache: &Path) -> Result<PathBuf, HubError> {
    let path = Path::new(model);
    if path.exists() || looks_like_a_path(model) {
        return Ok(path.to_path_buf());
    }
    let id = HubId::parse(model).map_err(|reason| HubError::BadId { model: model.to_string(), reason })?;
    id.snapshot(cache).map_err(|tried| HubError::NotCached {
        model: model.to_string(),
        repo: id.repo.clone(),
        revision_flag: if id.revision == "main" { String::new() } else { format!(" --revision {}", id.revision) },
        tried: tried.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "),
    })
}

/// A name only a path has: absolute, relative to `.` or `~`, with a separator other than
/// one `/`, or whose first part is a directory here.
fn looks_like_a_path(model: &str) -> bool {
    let path = Path::new(model);
    if path.is_absolute() || model.starts_with('.') || model.starts_with('~') || model.contains('\\') {
        return true;
    }
    if model.contains('@') {
        return false;
    }
    match model.split_once('/') {
        Some((first, rest)) => rest.contains('/') || rest.is_empty() || Path::new(first).is_dir(),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cache written as huggingface_hub writes it: blobs, a snapshot of symlinks, refs.
    fn cache(name: &str) -> PathBuf {
        let cache = std::env::temp_dir().join(format!("sesame-hub-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&cache);
        let repo = cache.join("models--org--model");
        let commit = "0123456789abcdef0123456789abcdef01234567";
        std::fs::create_dir_all(repo.join("blobs")).unwrap();
        std::fs::create_dir_all(repo.join("refs")).unwrap();
        std::fs::create_dir_all(repo.join("snapshots").join(commit)).unwrap();
        std::fs::write(repo.join("blobs/abc"), "{}").unwrap();
        std::os::unix::fs::symlink("../../blobs/abc", repo.join("snapshots").join(commit).join("config.json")).unwrap();
        std::fs::write(repo.join("refs/main"), commit).unwrap();
        cache
    }

    #[test]
    fn an_id_resolves_to_its_snapshot_by_branch_or_commit() {
        let cache = cache("resolve");
        let snapshot = cache.join("models--org--model/snapshots/0123456789abcdef0123456789abcdef01234567");
        assert_eq!(resolve_in("org/model", &cache), Ok(snapshot.clone()));
        assert_eq!(resolve_in("org/model@main", &cache), Ok(snapshot.clone()));
        assert_eq!(resolve_in("org/model@0123456789abcdef0123456789abcdef01234567", &cache), Ok(snapshot.clone()));
        assert!(snapshot.join("config.json").is_file(), "the symlink into blobs/ is followed");
        std::fs::remove_dir_all(&cache).unwrap();
    }

    #[test]
    fn an_id_not_in_the_cache_names_the_id_the_paths_tried_and_how_to_fetch_it() {
        let cache = cache("missing");
        let error = resolve_in("org/other@v2", &cache).unwrap_err().to_string();
        assert!(error.starts_with("org/other@v2: no such directory, and not in the HuggingFace cache"), "{error}");
        assert!(error.contains(&cache.join("models--org--other/refs/v2").display().to_string()), "{error}");
        assert!(error.contains("hf download org/other --revision v2") && !error.contains('\n'), "{error}");
        std::fs::remove_dir_all(&cache).unwrap();
    }

    #[test]
    fn ids_that_would_leave_the_cache_are_refused() {
        let cache = cache("traversal");
        for bad in ["org/model@../../etc", "org/model@/etc", "org/model@a/../../b", "org--x/model", "-org/model", "org/model.git", "org/.model"] {
            assert!(matches!(resolve_in(bad, &cache), Err(HubError::BadId { .. })), "{bad}: {:?}", resolve_in(bad, &cache));
        }
        // A reference whose content is a path is not followed out of snapshots/.
        std::fs::write(cache.join("models--org--model/refs/evil"), "../../..").unwrap();
        assert!(matches!(resolve_in("org/model@evil", &cache), Err(HubError::NotCached { .. })));
        std::fs::remove_dir_all(&cache).unwrap();
    }

    #[test]
    fn paths_stay_paths() {
        let cache = cache("paths");
        for path in ["/nonexistent/model", "./model", "../model", "a/b/c", "~/model"] {
            assert_eq!(resolve_in(path, &cache), Ok(PathBuf::from(path)));
        }
        std::fs::remove_dir_all(&cache).unwrap();
    }
}
