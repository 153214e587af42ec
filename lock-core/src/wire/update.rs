//! A guarded update's one call (`scripts/guarded_update.lua`) and how its reply reads.

use redis::Value;

use super::convert;
use super::protocol::Target;
use super::script::{Call, Op};
use crate::error::LockError;
use crate::update::{Step, Updated};

/// The call that applies `steps` under the hold `target` (fencing token `token`) as its
/// update number `seq`, its record kept `record_ms` past the lock's lease.
pub(crate) fn call(
    target: &Target<'_>,
    token: u64,
    seq: u64,
    steps: &[Step],
    record_ms: u64,
) -> Call {
    let mut call = Call::new(Op::GuardedUpdate);
    call.key(target.keys.hold(target.kind).as_ref())
        .key(target.keys.updated());
    for step in steps {
        call.key(step.key());
    }
    call.arg(target.owner).arg(token).arg(seq).arg(record_ms);
    let none: &[u8] = b"";
    for step in steps {
        match step {
            Step::Set { value, .. } => call.arg("set").arg(value.as_slice()).arg(none),
            Step::Delete { .. } => call.arg("del").arg(none).arg(none),
            Step::Add { n, .. } => call.arg("add").arg(*n).arg(none),
            Step::Take { n, floor, .. } => call.arg("take").arg(*n).arg(*floor),
            Step::HSet { field, value, .. } => {
                call.arg("hset").arg(field.as_slice()).arg(value.as_slice())
            }
            Step::HAdd { field, n, .. } => call.arg("hadd").arg(field.as_slice()).arg(*n),
            Step::Expire { ms, .. } => call.arg("pexpire").arg(*ms).arg(none),
        };
        // The fourth argument of every operation: unused, so each takes four.
        call.arg(none);
    }
    call
}

/// The script's reply: `{1, values…}`, `{0}` or `{2, op, left}`.
pub(crate) fn read(reply: Value) -> Result<Updated, LockError> {
    let mut all: Vec<i64> = convert(reply)?;
    let unexpected = |all: &[i64]| LockError::UnexpectedReply(format!("guarded update: {all:?}"));
    match all.first() {
        Some(1) => {
            all.remove(0);
            Ok(Updated::Applied { values: all })
        }
        Some(0) if all.len() == 1 => Ok(Updated::NotHeld),
        Some(2) => match all[..] {
            [2, op, left] => Ok(Updated::NotEnough {
                op: usize::try_from(op - 1).map_err(|_| unexpected(&all))?,
                left,
            }),
            _ => Err(unexpected(&all)),
        },
        _ => Err(unexpected(&all)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn int(n: i64) -> Value {
        Value::Int(n)
    }

    #[test]
    fn replies_read_into_typed_answers() {
        let read = |v: Vec<i64>| read(Value::Array(v.into_iter().map(int).collect()));
        assert_eq!(
            read(vec![1, 4, 1]).unwrap(),
            Updated::Applied { values: vec![4, 1] }
        );
        assert_eq!(read(vec![0]).unwrap(), Updated::NotHeld);
        assert_eq!(
            read(vec![2, 1, 0]).unwrap(),
            Updated::NotEnough { op: 0, left: 0 }
        );
        assert!(matches!(
            read(vec![2, 0, 0]),
            Err(LockError::UnexpectedReply(_))
        ));
        assert!(matches!(read(vec![7]), Err(LockError::UnexpectedReply(_))));
        assert!(matches!(read(vec![]), Err(LockError::UnexpectedReply(_))));
    }
}
