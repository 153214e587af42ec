//! The commands services send beside their locks, as the in-memory server answers them: the
//! counters, `HINCRBY`, the expiry commands, `SET`'s options, `GETDEL`, `MSET`, `DEL` and
//! `EXISTS` of many keys; and the error of a command it does not have.

use redis::Value;

use super::Server;

fn run(server: &Server, args: &[&str]) -> Value {
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    server.command(&cmd)
}

fn int(server: &Server, args: &[&str]) -> i64 {
    match run(server, args) {
        Value::Int(n) => n,
        other => panic!("{args:?}: {other:?}"),
    }
}

fn error(server: &Server, args: &[&str]) -> String {
    match run(server, args) {
        Value::ServerError(e) => format!("{e:?}"),
        other => panic!("{args:?} did not fail: {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn counters_count_from_zero_and_refuse_what_is_not_an_integer() {
    let server = Server::new();
    assert_eq!(int(&server, &["INCRBY", "c", "5"]), 5);
    assert_eq!(int(&server, &["DECRBY", "c", "7"]), -2);
    assert_eq!(int(&server, &["INCR", "c"]), -1);
    assert_eq!(int(&server, &["DECR", "c"]), -2);
    assert_eq!(int(&server, &["DECR", "new"]), -1);
    run(&server, &["SET", "t", "x"]);
    assert!(error(&server, &["INCRBY", "t", "1"]).contains("not an integer"));
    assert!(error(&server, &["INCRBY", "c", "x"]).contains("not an integer"));
    run(&server, &["SET", "max", &i64::MAX.to_string()]);
    assert!(error(&server, &["INCR", "max"]).contains("overflow"));
    assert!(error(&server, &["DECRBY", "c", &i64::MIN.to_string()]).contains("overflow"));
    assert!(error(&server, &["INCRBY", "c"]).contains("wrong number of arguments"));
    // A counter keeps its time to live.
    run(&server, &["SET", "ttl", "1", "PX", "5000"]);
    assert_eq!(int(&server, &["INCRBY", "ttl", "1"]), 2);
    assert_eq!(int(&server, &["PTTL", "ttl"]), 5000);
}

#[tokio::test(start_paused = true)]
async fn hincrby_adds_to_a_field_and_is_typed() {
    let server = Server::new();
    assert_eq!(int(&server, &["HINCRBY", "h", "f", "3"]), 3);
    assert_eq!(int(&server, &["HINCRBY", "h", "f", "-5"]), -2);
    run(&server, &["HSET", "h", "s", "x"]);
    assert!(error(&server, &["HINCRBY", "h", "s", "1"]).contains("not an integer"));
    run(&server, &["SET", "str", "1"]);
    assert!(error(&server, &["HINCRBY", "str", "f", "1"]).contains("WRONGTYPE"));
}

#[tokio::test(start_paused = true)]
async fn expire_ttl_and_set_options_read_as_on_redis() {
    let server = Server::new();
    run(&server, &["SET", "k", "v"]);
    assert_eq!(int(&server, &["TTL", "k"]), -1);
    assert_eq!(int(&server, &["TTL", "missing"]), -2);
    assert_eq!(int(&server, &["EXPIRE", "k", "10"]), 1);
    assert_eq!(int(&server, &["PTTL", "k"]), 10_000);
    assert_eq!(int(&server, &["TTL", "k"]), 10);
    assert_eq!(int(&server, &["PEXPIRE", "k", "2500"]), 1);
    assert_eq!(
        int(&server, &["TTL", "k"]),
        3,
        "rounded to the nearest second"
    );
    assert_eq!(int(&server, &["EXPIRE", "missing", "10"]), 0);
    assert!(error(&server, &["EXPIRE", "k", "10", "NX"]).contains("in-memory backend"));
    assert_eq!(run(&server, &["SET", "k", "w", "NX"]), Value::Nil);
    assert_eq!(run(&server, &["SET", "new", "w", "XX"]), Value::Nil);
    assert_eq!(
        run(&server, &["SET", "k", "w", "XX", "EX", "7"]),
        Value::Okay
    );
    assert_eq!(int(&server, &["TTL", "k"]), 7);
    tokio::time::advance(std::time::Duration::from_secs(7)).await;
    assert_eq!(int(&server, &["EXISTS", "k"]), 0);
}

#[tokio::test(start_paused = true)]
async fn getdel_mset_and_many_keys_at_once() {
    let server = Server::new();
    assert_eq!(
        run(&server, &["MSET", "a", "1", "b", "2", "c", "3"]),
        Value::Okay
    );
    assert!(error(&server, &["MSET", "a"]).contains("wrong number of arguments"));
    assert_eq!(int(&server, &["EXISTS", "a", "b", "x", "a"]), 3);
    assert_eq!(
        run(&server, &["GETDEL", "a"]),
        Value::BulkString(b"1".to_vec())
    );
    assert_eq!(run(&server, &["GETDEL", "a"]), Value::Nil);
    assert_eq!(int(&server, &["DEL", "a", "b", "c", "x"]), 2);
    run(&server, &["HSET", "h", "f", "v"]);
    assert!(error(&server, &["GETDEL", "h"]).contains("WRONGTYPE"));
}

#[tokio::test(start_paused = true)]
async fn a_command_it_does_not_have_names_itself_and_the_backend() {
    let server = Server::new();
    let e = error(&server, &["LPUSH", "l", "x"]);
    assert!(
        e.contains("unknown command 'LPUSH'") && e.contains("in-memory backend"),
        "{e}"
    );
}
