//! A dispatcher that keeps failing must not stall silently (no stale "nothing new", no write
//! acknowledged that consumers will never see): writes and empty reads name the failure until
//! a pass succeeds.

mod common;

use std::time::Duration;

use ferromq_store::{AppendError, MessageStore, ReadError, StoreError, TagFilter};

use common::{body_of, draft, read_all, test_config};

/// A dispatcher that keeps failing (here: it cannot create a ConsumeQueue file, as when the
/// process is out of descriptors) is not a silent stall: writes are refused with a named
/// error and an empty read says why instead of "nothing new"; records already dispatched stay
/// readable; once a pass succeeds everything resumes and nothing acknowledged is missing.
#[test]
fn a_failing_dispatcher_refuses_writes_and_empty_reads_until_it_recovers() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = MessageStore::open(test_config(dir.path())).expect("open");
    store.put(&[draft("T", 0, b"before", &[])]).expect("put");
    let end = store.stats().written_end;
    assert_eq!(store.wait_dispatched(end, Duration::from_secs(5)), end);

    store.faults().fail_dispatches(u32::MAX);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while store.stats().dispatch_failure.is_none() {
        assert!(
            std::time::Instant::now() < deadline,
            "the failure surfaces within 5 s"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let failure = store.stats().dispatch_failure.expect("reported in stats");
    assert!(failure.contains("Too many open files"), "{failure}");
    let refused = store
        .put(&[draft("T", 0, b"during", &[])])
        .expect_err("refused");
    assert!(
        matches!(refused, StoreError::Append(AppendError::DispatchStalled(_))),
        "{refused:?}"
    );
    let read = store
        .get_messages("T", 0, 0, 10, usize::MAX, &TagFilter::All)
        .expect("old data");
    assert_eq!(read.messages.len(), 1, "dispatched records stay readable");
    let empty = store
        .get_messages("T", 0, 1, 10, usize::MAX, &TagFilter::All)
        .expect_err("an empty read says why");
    assert!(matches!(empty, ReadError::DispatchStalled(_)), "{empty:?}");

    store.faults().fail_dispatches(0);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while store.stats().dispatch_failure.is_some() {
        assert!(
            std::time::Instant::now() < deadline,
            "dispatch resumes within 5 s"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    store
        .put(&[draft("T", 0, b"after", &[])])
        .expect("writes resume");
    let bodies: Vec<Vec<u8>> = read_all(&store, "T", 0).iter().map(body_of).collect();
    assert_eq!(bodies, vec![b"before".to_vec(), b"after".to_vec()]);
    store.close().expect("close");
}
