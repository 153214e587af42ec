//! The native calls' commands and the reading of their replies, without a server.

use std::time::Duration;

use redis::Value;

use crate::wire::owner::OwnerId;

use super::{Acquire, Call, Compare, Found};
use crate::error::LockError;
use crate::wire::answer::{Answer, GaveBack, Tokens};

/// A native acquisition of `lock:{a}` (also the wire room's other tests').
pub(crate) fn acquire() -> Call {
    Call::acquire(Acquire {
        key: "lock:{a}".into(),
        owner: OwnerId::new("me", 1),
        lease_ms: 30_000,
        counter: "lock:fence",
        seed: 1_795_000_000_000_000,
        compare: Compare::Commands,
        holder_ttl: true,
    })
}

fn exec(old: Value, pttl: i64) -> Value {
    Value::Array(vec![Value::Nil, Value::Int(42), old, Value::Int(pttl)])
}

fn answer(found: Result<Found, LockError>) -> Answer {
    match found {
        Ok(Found::Answer(answer)) => answer,
        other => panic!("not an answer: {other:?}"),
    }
}

#[test]
fn an_acquisition_reads_into_an_answer() {
    let call = acquire();
    let read = |old, pttl| answer(call.found(exec(old, pttl)));
    let granted = Answer::Granted(Tokens::Each(42));
    assert_eq!(read(Value::Nil, 30_000), granted);
    let mine = Value::BulkString(b"me:1".to_vec());
    assert_eq!(read(mine, 29_000), granted, "a repeat keeps its token");
    let other = || Value::BulkString(b"you:7".to_vec());
    let busy = |ms: Option<u64>| Answer::Busy {
        index: 0,
        retry_in: ms.map(Duration::from_millis),
    };
    assert_eq!(read(other(), 1_500), busy(Some(1_500)));
    assert_eq!(read(other(), -1), busy(None));
    assert!(call.found(Value::Int(1)).is_err());
    assert!(call.found(Value::Array(vec![])).is_err());
}

#[test]
fn a_first_attempt_that_will_wait_does_not_ask_the_holders_lease() {
    let call = Call::acquire(Acquire {
        key: "lock:{a}".into(),
        owner: OwnerId::new("me", 1),
        lease_ms: 30_000,
        counter: "lock:fence",
        seed: 1_795_000_000_000_000,
        compare: Compare::Script,
        holder_ttl: false,
    });
    assert_eq!(call.pipe.len(), 3, "no PTTL");
    let exec = |old| Value::Array(vec![Value::Nil, Value::Int(42), old]);
    let other = Value::BulkString(b"you:7".to_vec());
    assert_eq!(
        answer(call.found(exec(other))),
        Answer::BusyAskAgain { index: 0 }
    );
    assert_eq!(
        answer(call.found(exec(Value::Nil))),
        Answer::Granted(Tokens::Each(42))
    );
    // A reply of the other shape (with a PTTL) is not this call's.
    assert!(call.found(exec_with_pttl()).is_err());
    assert!(
        acquire()
            .found(Value::Array(vec![Value::Nil, Value::Int(42), Value::Nil]))
            .is_err()
    );
}

fn exec_with_pttl() -> Value {
    exec(Value::Nil, 30_000)
}

#[test]
fn a_scripted_free_lock_string_is_found_as_such() {
    let old = b"|0|1795000000000000|1795000000000000|".to_vec();
    let found = acquire().found(exec(Value::BulkString(old.clone()), 3_600_000));
    let Ok(Found::Scripted(clear)) = found else {
        panic!("not a clear: {found:?}");
    };
    let sent: Vec<_> = clear
        .pipeline()
        .cmd_iter()
        .map(|c| c.args_iter().count())
        .collect();
    assert_eq!(sent, [3], "DELIFEQ key old");
}

#[test]
fn releases_renewals_and_reentries_read_into_typed_answers() {
    let release = Call::release(
        Compare::Commands,
        "lock:{a}".into(),
        "me:1",
        true,
        ("PUBLISH", "c", 42),
    );
    let gave_back =
        |call: &Call, replies, resent| call.gave_back(Value::Array(replies), resent).unwrap();
    let (deleted, gone) = (vec![Value::Int(1), Value::Int(0)], vec![Value::Int(0)]);
    assert_eq!(gave_back(&release, deleted, false), GaveBack::Held);
    assert_eq!(gave_back(&release, gone.clone(), false), GaveBack::NotHeld);
    assert_eq!(gave_back(&release, gone, true), GaveBack::Held, "a repeat");
    let one = Call::release(
        Compare::Commands,
        "lock:{a}".into(),
        "me:1",
        false,
        ("PUBLISH", "c", 42),
    );
    assert_eq!(gave_back(&one, vec![Value::Okay], false), GaveBack::Held);
    assert_eq!(gave_back(&one, vec![Value::Nil], true), GaveBack::NotHeld);
    let renew = Call::renew(
        Compare::Commands,
        [("lock:{a}", "me:1"), ("lock:{b}", "me:2")],
        30_000,
    );
    assert_eq!(renew.key(), "lock:{a}");
    let renewed = renew.renewed(Value::Array(vec![Value::Okay, Value::Nil]));
    assert_eq!(renewed.unwrap(), [true, false]);
    assert!(renew.gave_back(Value::Array(vec![]), false).is_err());
    let reenter = Call::reenter(Compare::Commands, "lock:{a}".into(), "me:1", 30_000, 42);
    let read = |replies| answer(reenter.found(Value::Array(replies)));
    assert_eq!(read(vec![Value::Okay]), Answer::Granted(Tokens::Each(42)));
    assert_eq!(read(vec![Value::Nil]), Answer::Lost { index: 0 });
    let force = Call::force_unlock("lock:{a}", ("PUBLISH", "c"));
    assert!(
        force
            .freed(Value::Array(vec![Value::Int(1), Value::Int(0)]))
            .unwrap()
    );
    assert!(
        !force
            .freed(Value::Array(vec![Value::Int(0), Value::Int(0)]))
            .unwrap()
    );
}
