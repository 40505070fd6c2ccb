use super::super::test_files::{mkdir, symlink, temp_dir};
use super::*;

fn touch(path: &Path) {
    if let Some(parent) = path.parent() {
        mkdir(parent);
    }
    if let Err(e) = fs::write(path, "x") {
        panic!("write {}: {e}", path.display());
    }
}

fn walk(root: &Path, ignore_dot_files: bool, max_entries: usize) -> Vec<String> {
    let options = WalkOptions {
        ignore_dot_files,
        max_entries,
    };
    match files(root, options) {
        Ok(files) => files
            .iter()
            .filter_map(|f| f.strip_prefix(root).ok())
            .map(|f| f.display().to_string())
            .collect(),
        Err((path, e)) => panic!("{}: {e}", path.display()),
    }
}

#[test]
fn every_file_of_the_tree_in_lexical_depth_first_order() {
    let dir = temp_dir();
    let root = dir.path();
    for name in ["b.conf", "a/z.yaml", "a/b/c", "a.txt", ".hidden", "c/.x/y"] {
        touch(&root.join(name));
    }
    assert_eq!(
        walk(root, false, 100),
        [".hidden", "a/b/c", "a/z.yaml", "a.txt", "b.conf", "c/.x/y"]
    );
    assert_eq!(
        walk(root, true, 100),
        ["a/b/c", "a/z.yaml", "a.txt", "b.conf"]
    );
}

#[test]
fn a_configmap_volume_is_read_once_and_symlink_loops_end() {
    let dir = temp_dir();
    let root = dir.path();
    touch(&root.join("..2026_01_01_00_00_00.1/limits.yaml"));
    symlink("..2026_01_01_00_00_00.1", &root.join("..data"));
    symlink("..data/limits.yaml", &root.join("limits.yaml"));
    // A loop and a link to a directory: neither is followed.
    mkdir(&root.join("sub"));
    symlink("..", &root.join("sub/up"));
    symlink("loop", &root.join("loop"));
    let files = walk(root, false, 100);
    // The looping link is returned as a file; reading it fails with ELOOP, at once.
    assert_eq!(files, ["limits.yaml", "loop"]);
}

#[test]
fn files_and_directories_are_bounded() {
    let dir = temp_dir();
    for i in 0..5 {
        touch(&dir.path().join(format!("d{i}/f")));
    }
    assert_eq!(walk(dir.path(), false, 5).len(), 5);
    let options = WalkOptions {
        ignore_dot_files: false,
        max_entries: 4,
    };
    assert!(matches!(
        files(dir.path(), options),
        Err((_, WalkError::TooManyDirectories { max: 4 }))
    ));
}
