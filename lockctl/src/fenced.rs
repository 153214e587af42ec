//! `fenced KEY...`: values written with lock-core's fenced writes (`fenced::set`, a claim and
//! `write_claimed`, the fenced counters `add` and `take`), each beside its fence: the token
//! of the holder that wrote or claimed it last, read with `fenced::get` on the lock client's
//! connection (the same deployment as the locks).
//!
//! Keys are the application's own, given whole (no prefix is added). A key that holds no
//! fenced value is shown as missing (exit 1 when any is); a key of another kind (a plain
//! string, a guarded update's counter) is an error naming it.

use lock_core::fenced;
use serde::Serialize;

use crate::cli::FencedArgs;
use crate::connect::Target;
use crate::exit::{Code, Failure};
use crate::output::Output;

/// One key's fenced value, as `fenced` reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct FencedValue {
    pub(crate) key: String,
    /// The value (lossily as UTF-8), or none for a missing key.
    pub(crate) value: Option<String>,
    /// The fencing token it was written (or claimed) with.
    pub(crate) fence: Option<u64>,
}

/// Reads every key and prints the table (or one JSON line: `{keys: [{key, value, fence}]}`).
pub(crate) async fn run(
    target: &Target,
    args: &FencedArgs,
    out: &mut Output,
) -> Result<Code, Failure> {
    let mut conn = target.client.connection();
    let mut values = Vec::with_capacity(args.keys.len());
    for key in &args.keys {
        let read = fenced::get::<_, Vec<u8>>(&mut conn, key)
            .await
            .map_err(|e| Failure::from_lock(e, &target.label))?;
        values.push(FencedValue {
            key: key.clone(),
            value: read
                .as_ref()
                .map(|(v, _)| String::from_utf8_lossy(v).into_owned()),
            fence: read.map(|(_, fence)| fence),
        });
    }
    if out.is_json() {
        out.json_line(&serde_json::json!({ "keys": values }))
    } else {
        let width = values.iter().map(|v| v.key.len()).max().unwrap_or(3).max(3);
        let mut text = format!("{:width$}  {:>17}  VALUE", "KEY", "FENCE");
        for v in &values {
            let fence = v.fence.map_or_else(|| "-".to_owned(), |f| f.to_string());
            let value = v.value.as_deref().unwrap_or("(no fenced value)");
            text.push_str(&format!("\n{:width$}  {fence:>17}  {value}", v.key));
        }
        out.line(&text)
    }
    .map_err(Failure::Output)?;
    Ok(if values.iter().all(|v| v.fence.is_some()) {
        Code::Done
    } else {
        Code::NotHeld
    })
}
