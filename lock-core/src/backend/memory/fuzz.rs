//! Any call of any operation (its script, in the server's Lua), and any command, with any
//! arguments, on any state the previous calls left: an answer or an error value, never a
//! panic or a hang.

use proptest::prelude::*;
use redis::Value;

use super::commands;
use super::server::Server;
use crate::util::arbitrary::config;
use crate::wire::script::{Call, Op, Scripts};

/// Arguments as the engine sends them, at their limits, and anything else.
fn word() -> impl Strategy<Value = Vec<u8>> {
    let words: Vec<&'static [u8]> = vec![
        b"0",
        b"1",
        b"2",
        b"3",
        b"-1",
        b"60000",
        b"9223372036854775807",
        b"-9223372036854775808",
        b"99999999999999999999",
        b"",
        b"a",
        b"r",
        b"o:1",
        b"o:2",
        b"o:1|1|5||1",
        b"|0|5|5|",
        b"1|5",
        b"k1",
    ];
    prop_oneof![
        4 => prop::sample::select(words).prop_map(<[u8]>::to_vec),
        1 => prop::collection::vec(any::<u8>(), 0..12),
    ]
}

/// A few keys, so that calls meet each other's values (of every type).
fn key() -> impl Strategy<Value = Vec<u8>> {
    prop::sample::select(vec![&b"k1"[..], b"k2", b"k3"]).prop_map(<[u8]>::to_vec)
}

/// One call: an operation with keys and arguments, or a plain command.
fn call() -> impl Strategy<Value = (Option<Op>, Vec<Vec<u8>>, Vec<Vec<u8>>)> {
    let op = prop_oneof![
        4 => prop::sample::select(Op::ALL.to_vec()).prop_map(Some),
        1 => Just(None),
    ];
    (
        op,
        prop::collection::vec(key(), 0..5),
        prop::collection::vec(word(), 0..12),
    )
}

fn run(server: &Server, (op, keys, args): &(Option<Op>, Vec<Vec<u8>>, Vec<Vec<u8>>)) -> Value {
    let Some(op) = op else {
        let names = [
            "SET",
            "GET",
            "DEL",
            "INCR",
            "PTTL",
            "PEXPIRE",
            "DELIFEQ",
            "PUBLISH",
            "ZADD",
            "ZRANGE",
            "ZRANGEBYSCORE",
            "ZREMRANGEBYSCORE",
            "HSET",
            "HDEL",
            "HGETALL",
            "EVAL",
        ];
        let mut cmd = redis::cmd(names[args.len() % names.len()]);
        cmd.arg(keys).arg(args);
        return server.call(|ctx, lua| commands::command(ctx, lua, &cmd));
    };
    let mut call = Call::new(*op);
    for key in keys {
        call.key(key.as_slice());
    }
    for arg in args {
        call.arg(arg.as_slice());
    }
    server.call(|ctx, lua| commands::op(ctx, lua, &call))
}

#[test]
fn an_operation_runs_the_text_the_plain_flavour_sends() {
    for op in Op::ALL {
        let sent = Scripts::get(false).script(*op).get_hash();
        assert_eq!(redis::Script::new(&op.script_text()).get_hash(), sent);
    }
}

proptest! {
    #![proptest_config(config(100))]

    #[test]
    fn any_sequence_of_calls_answers_without_panicking(calls in prop::collection::vec(call(), 1..40)) {
        let server = Server::new();
        for call in &calls {
            run(&server, call);
        }
        server.dump();
    }
}
