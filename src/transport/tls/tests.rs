use super::*;

fn files(dir: &Path) -> TlsFiles {
    TlsFiles {
        cert: dir.join("cert.pem"),
        key: dir.join("key.pem"),
        client_ca: None,
        client_san: None,
    }
}

#[test]
fn a_missing_a_fifo_or_an_oversized_file_is_refused_naming_the_setting() {
    let dir = tempfile::tempdir().expect("temp dir");
    let error = TlsReloader::load(files(dir.path())).err().expect("missing");
    assert!(error.to_string().starts_with("--grpc-tls-cert"), "{error}");

    let fifo = dir.path().join("cert.pem");
    let path = std::ffi::CString::new(fifo.to_string_lossy().as_bytes()).expect("path");
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o600) }, 0, "mkfifo");
    let error = TlsReloader::load(files(dir.path())).err().expect("a FIFO");
    assert!(matches!(error, TlsError::NotAFile { .. }), "{error}");
    std::fs::remove_file(&fifo).expect("remove FIFO");

    std::fs::write(&fifo, vec![b'a'; MAX_PEM_BYTES as usize + 1]).expect("write");
    let error = TlsReloader::load(files(dir.path()))
        .err()
        .expect("too large");
    assert!(matches!(error, TlsError::TooLarge { .. }), "{error}");
}

#[test]
fn a_san_that_is_not_a_name_is_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut files = files(dir.path());
    files.client_san = Some("not a name!".into());
    let error = TlsReloader::load(files).err().expect("bad SAN");
    assert!(matches!(error, TlsError::BadSan { .. }), "{error}");
}
