//! What every [`VaultBackend`] guarantees, written once: each check takes a [`World`] (a backend
//! plus a way for a person to change a file behind vaultgate's back) and panics, naming the
//! guarantee, when the backend breaks it. The folder backend runs it in this crate's tests; a
//! backend elsewhere (a git remote) runs the same suite with the `conformance` feature.
//!
//! The transaction-level guarantees built on these (exactly once through crashes, one audit
//! record, rollback keeping an outside edit, honest partial success) are checked end to end by the
//! black-box suites, which run the real binary against the backend in use.

use proposals::ops::{FileOp, OpState, Zone, inverse_all};
use proposals::recovery::{Observed, Recovery, decide};
use proposals::sha256_hex;

use super::{Cas, ChangeFeed, VaultBackend, run_step};

/// A file outside the vault a link leads to: its bytes, and how to read them again.
pub type Outside<'a> = (Vec<u8>, Box<dyn Fn() -> Vec<u8> + 'a>);

/// A vault as a backend reaches it, and a person outside vaultgate.
pub trait World {
    fn backend(&self) -> Box<dyn VaultBackend + '_>;
    /// A person writes (`Some`) or removes (`None`) a note, as an editor or a `git push` would.
    fn edit(&self, path: &str, bytes: Option<&[u8]>);
    /// A person makes the note at `path` a link to a file outside the vault and returns that
    /// file's bytes and a way to read them again; `None` for a backend whose notes cannot be links.
    fn link_outside(&self, path: &str) -> Option<Outside<'_>>;
    /// The vault's feed of outside changes.
    fn feed(&self) -> Box<dyn ChangeFeed + '_>;
}

/// Every check, in order.
pub fn run_all(world: &dyn World) {
    a_step_lands_only_on_the_bytes_it_expects(world);
    an_outside_edit_is_never_overwritten(world);
    a_landed_step_does_not_land_twice(world);
    observe_tells_recovery_what_to_do(world);
    the_inverse_puts_every_file_back_and_keeps_an_outside_edit(world);
    blobs_are_kept_by_their_hash(world);
    a_link_is_never_followed(world);
    an_outside_edit_reaches_the_feed(world);
}

fn put(path: &str, before: Option<&[u8]>, after: &[u8]) -> FileOp {
    FileOp::Put {
        zone: Zone::Note,
        path: path.into(),
        before: before.map(sha256_hex),
        after: sha256_hex(after),
    }
}

fn stored(world: &dyn World, bytes: &[&[u8]]) {
    let b = world.backend();
    for bytes in bytes {
        b.store_blob(&sha256_hex(bytes), bytes).expect("storing a blob");
    }
}

fn note(world: &dyn World, path: &str) -> Option<Vec<u8>> {
    world
        .backend()
        .read(Zone::Note, path)
        .expect("reading a note")
        .map(|(b, h)| {
            assert_eq!(h, sha256_hex(&b), "read returns the hash of the bytes it returns");
            b
        })
}

/// Create, replace, delete and rename each land when the files hold what they expect.
pub fn a_step_lands_only_on_the_bytes_it_expects(world: &dyn World) {
    let b = world.backend();
    stored(world, &[b"one\n", b"two\n"]);
    let create = put("conf/land.md", None, b"one\n");
    assert_eq!(
        run_step(b.as_ref(), &create).expect("create"),
        Cas::Done,
        "a create lands"
    );
    assert_eq!(note(world, "conf/land.md").as_deref(), Some(&b"one\n"[..]));
    let replace = put("conf/land.md", Some(b"one\n"), b"two\n");
    assert_eq!(
        run_step(b.as_ref(), &replace).expect("replace"),
        Cas::Done,
        "a replace lands"
    );
    assert_eq!(note(world, "conf/land.md").as_deref(), Some(&b"two\n"[..]));
    let rename = FileOp::Rename {
        from_zone: Zone::Note,
        from: "conf/land.md".into(),
        to_zone: Zone::Note,
        to: "conf/landed.md".into(),
        hash: sha256_hex(b"two\n"),
    };
    assert_eq!(
        run_step(b.as_ref(), &rename).expect("rename"),
        Cas::Done,
        "a rename lands"
    );
    assert_eq!(
        note(world, "conf/land.md"),
        None,
        "a rename leaves nothing behind"
    );
    assert_eq!(note(world, "conf/landed.md").as_deref(), Some(&b"two\n"[..]));
    let delete = FileOp::Delete {
        zone: Zone::Note,
        path: "conf/landed.md".into(),
        before: sha256_hex(b"two\n"),
    };
    assert_eq!(
        run_step(b.as_ref(), &delete).expect("delete"),
        Cas::Done,
        "a delete lands"
    );
    assert_eq!(note(world, "conf/landed.md"), None);
}

/// SECURITY(T-PROP7): every kind of step finds the person's bytes and writes nothing.
pub fn an_outside_edit_is_never_overwritten(world: &dyn World) {
    let b = world.backend();
    stored(world, &[b"base\n", b"ours\n"]);
    world.edit("conf/edited.md", Some(b"base\n"));
    let ours = put("conf/edited.md", Some(b"base\n"), b"ours\n");
    world.edit("conf/edited.md", Some(b"the person's\n"));
    let steps = [
        ours,
        put("conf/edited.md", None, b"ours\n"),
        FileOp::Delete {
            zone: Zone::Note,
            path: "conf/edited.md".into(),
            before: sha256_hex(b"base\n"),
        },
        FileOp::Rename {
            from_zone: Zone::Note,
            from: "conf/edited.md".into(),
            to_zone: Zone::Note,
            to: "conf/elsewhere.md".into(),
            hash: sha256_hex(b"base\n"),
        },
    ];
    for step in &steps {
        assert!(
            matches!(run_step(b.as_ref(), step).expect("a step"), Cas::Conflict(_)),
            "a step on changed bytes answers Conflict: {step:?}"
        );
        assert_eq!(
            note(world, "conf/edited.md").as_deref(),
            Some(&b"the person's\n"[..]),
            "the person's bytes are kept: {step:?}"
        );
    }
    assert_eq!(
        note(world, "conf/elsewhere.md"),
        None,
        "nothing appeared elsewhere"
    );
    // A rename never replaces what is at its destination.
    world.edit("conf/src.md", Some(b"base\n"));
    world.edit("conf/dst.md", Some(b"taken\n"));
    let onto = FileOp::Rename {
        from_zone: Zone::Note,
        from: "conf/src.md".into(),
        to_zone: Zone::Note,
        to: "conf/dst.md".into(),
        hash: sha256_hex(b"base\n"),
    };
    assert!(matches!(
        run_step(b.as_ref(), &onto).expect("rename"),
        Cas::Conflict(_)
    ));
    assert_eq!(note(world, "conf/dst.md").as_deref(), Some(&b"taken\n"[..]));
    assert_eq!(note(world, "conf/src.md").as_deref(), Some(&b"base\n"[..]));
}

/// A step run again after it landed (a retry, a recovery that runs twice) changes nothing.
pub fn a_landed_step_does_not_land_twice(world: &dyn World) {
    let b = world.backend();
    stored(world, &[b"once\n"]);
    let create = put("conf/once.md", None, b"once\n");
    assert_eq!(run_step(b.as_ref(), &create).expect("create"), Cas::Done);
    assert_eq!(b.op_state(&create).expect("state"), OpState::After);
    assert!(
        matches!(run_step(b.as_ref(), &create).expect("again"), Cas::Conflict(_)),
        "a landed create does not land again"
    );
    assert_eq!(note(world, "conf/once.md").as_deref(), Some(&b"once\n"[..]));
}

/// `observe` reports each step's state, and the recovery decision made from it is the right one:
/// finish a write cut between its steps, roll back one that meets an outside edit.
pub fn observe_tells_recovery_what_to_do(world: &dyn World) {
    let b = world.backend();
    stored(world, &[b"a1\n", b"a2\n", b"b1\n", b"b2\n"]);
    world.edit("conf/obs-a.md", Some(b"a1\n"));
    world.edit("conf/obs-b.md", Some(b"b1\n"));
    let ops = vec![
        put("conf/obs-a.md", Some(b"a1\n"), b"a2\n"),
        put("conf/obs-b.md", Some(b"b1\n"), b"b2\n"),
    ];
    let states = b.observe(&ops).expect("observe");
    assert_eq!(states, vec![OpState::Before, OpState::Before], "nothing ran yet");
    assert_eq!(
        decide(false, Observed::Files(&states)),
        Recovery::Finish { remaining: 2 }
    );
    // Cut after the first step.
    assert_eq!(run_step(b.as_ref(), &ops[0]).expect("first step"), Cas::Done);
    let states = b.observe(&ops).expect("observe");
    assert_eq!(
        states,
        vec![OpState::After, OpState::Before],
        "cut between the steps"
    );
    assert_eq!(
        decide(false, Observed::Files(&states)),
        Recovery::Finish { remaining: 1 }
    );
    // A person edits the second note before recovery.
    world.edit("conf/obs-b.md", Some(b"the person's\n"));
    let states = b.observe(&ops).expect("observe");
    assert_eq!(states, vec![OpState::After, OpState::Other]);
    assert_eq!(
        decide(false, Observed::Files(&states)),
        Recovery::RollBack { op: 1 }
    );
}

/// A write's inverse, run newest first, puts each file it wrote back, and leaves a file a person
/// changed meanwhile as the person left it.
pub fn the_inverse_puts_every_file_back_and_keeps_an_outside_edit(world: &dyn World) {
    let b = world.backend();
    stored(world, &[b"x1\n", b"x2\n", b"y1\n", b"y2\n"]);
    world.edit("conf/inv-x.md", Some(b"x1\n"));
    world.edit("conf/inv-y.md", Some(b"y1\n"));
    let ops = vec![
        put("conf/inv-x.md", Some(b"x1\n"), b"x2\n"),
        put("conf/inv-y.md", Some(b"y1\n"), b"y2\n"),
        put("conf/inv-new.md", None, b"x2\n"),
    ];
    for op in &ops {
        assert_eq!(run_step(b.as_ref(), op).expect("a step"), Cas::Done);
    }
    world.edit("conf/inv-y.md", Some(b"the person's\n"));
    // Every inverse step is run; the one on the person's file must find their bytes.
    for inv in inverse_all(&ops) {
        let edited = inv.paths().iter().any(|(_, p)| *p == "conf/inv-y.md");
        let ran = run_step(b.as_ref(), &inv).expect("an inverse step");
        if edited {
            assert!(
                matches!(ran, Cas::Conflict(_)),
                "the step back over the person's edit: {ran:?}"
            );
        } else {
            assert_eq!(ran, Cas::Done, "{inv:?}");
        }
    }
    assert_eq!(note(world, "conf/inv-x.md").as_deref(), Some(&b"x1\n"[..]));
    assert_eq!(
        note(world, "conf/inv-y.md").as_deref(),
        Some(&b"the person's\n"[..]),
        "the outside edit is kept"
    );
    assert_eq!(note(world, "conf/inv-new.md"), None, "a created file goes");
}

/// Blobs are stored once per hash, read back checked, and removed.
pub fn blobs_are_kept_by_their_hash(world: &dyn World) {
    let b = world.backend();
    let bytes = b"a blob\n";
    let hash = sha256_hex(bytes);
    b.store_blob(&hash, bytes).expect("store");
    b.store_blob(&hash, bytes).expect("storing again is fine");
    assert!(b.has_blob(&hash).expect("has"));
    assert_eq!(b.blob(&hash).expect("blob"), bytes);
    assert!(b.remove_blob(&hash).expect("remove"));
    assert!(!b.has_blob(&hash).expect("has"));
    assert!(
        !b.remove_blob(&hash).expect("remove again"),
        "nothing left to remove"
    );
    assert!(
        b.blob(&hash).is_err(),
        "a missing blob is an error, never empty bytes"
    );
}

/// SECURITY(T-PATH): a note that is a link to a file outside the vault is neither read nor
/// written through: no step reaches the file it points to.
pub fn a_link_is_never_followed(world: &dyn World) {
    let Some((outside, read_outside)) = world.link_outside("conf/link.md") else {
        return;
    };
    let b = world.backend();
    stored(world, &[b"through the link\n"]);
    if let Ok(Some((bytes, _))) = b.read(Zone::Note, "conf/link.md") {
        assert_ne!(bytes, outside, "a read follows no link");
    }
    let steps = [
        FileOp::Put {
            zone: Zone::Note,
            path: "conf/link.md".into(),
            before: Some(sha256_hex(&outside)),
            after: sha256_hex(b"through the link\n"),
        },
        put("conf/link.md", None, b"through the link\n"),
        FileOp::Delete {
            zone: Zone::Note,
            path: "conf/link.md".into(),
            before: sha256_hex(&outside),
        },
    ];
    for step in &steps {
        if let Ok(ran) = run_step(b.as_ref(), step) {
            assert!(matches!(ran, Cas::Conflict(_)), "a step through a link: {step:?}");
        }
        assert_eq!(
            read_outside(),
            outside,
            "the file the link points to is untouched: {step:?}"
        );
    }
}

/// A person's edit reaches the feed: a batch names the note (or says it lost track, so the updater
/// walks), within a bound; once the feed's guard is dropped, nothing more is delivered.
pub fn an_outside_edit_reaches_the_feed(world: &dyn World) {
    use std::time::{Duration, Instant};
    let (tx, rx) = std::sync::mpsc::channel();
    let tx = std::sync::Mutex::new(tx);
    let guard = world
        .feed()
        .follow(Box::new(move |batch| {
            if let Ok(tx) = tx.lock() {
                let _ = tx.send(batch);
            }
        }))
        .expect("following the feed");
    world.edit("conf/fed.md", Some(b"a person's note\n"));
    let deadline = Instant::now() + Duration::from_secs(10);
    let seen = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(batch) if batch.lost || batch.paths.iter().any(|p| p.ends_with("conf/fed.md")) => break true,
            Ok(_) => continue,
            Err(_) => break false,
        }
    };
    assert!(seen, "an outside edit reaches the feed");
    drop(guard);
    // Whatever was under way when the guard went is drained; then the feed is silent.
    std::thread::sleep(Duration::from_millis(1_500));
    while rx.try_recv().is_ok() {}
    world.edit("conf/fed.md", Some(b"edited after the feed stopped\n"));
    assert!(
        rx.recv_timeout(Duration::from_millis(1_500)).is_err(),
        "a stopped feed delivers nothing"
    );
}
