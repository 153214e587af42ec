//! Redis-style glob matching (`*`, `?`, `[abc]`, `[^a-z]`, `\` escapes), for lock names
//! that arrive by subscription: Redis's ACL grants a `PSUBSCRIBE` only for exactly an allowed
//! pattern (`&lock:*`), so lockctl subscribes to everything under the prefix and matches the
//! names here, the way `SCAN MATCH` matches keys on the server. And which patterns can match a
//! lock name at all.

/// A compiled glob.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Glob(Vec<char>);

impl Glob {
    /// The glob `pattern`.
    pub(crate) fn new(pattern: &str) -> Glob {
        Glob(pattern.chars().collect())
    }

    /// Whether `text` matches, as Redis would match it.
    pub(crate) fn matches(&self, text: &str) -> bool {
        let text: Vec<char> = text.chars().collect();
        matches(&self.0, &text)
    }
}

/// Why `pattern` cannot be a glob over lock names, if it cannot: names never contain braces,
/// whitespace or control characters, so a pattern with them would match nothing lock-core
/// wrote (or, with a brace, another part of the key).
pub(crate) fn check_pattern(pattern: &str) -> Result<(), String> {
    if pattern.is_empty() {
        return Err("the pattern is empty (use * for every name)".to_owned());
    }
    if pattern.contains(['{', '}']) || pattern.chars().any(|c| c.is_whitespace() || c.is_control())
    {
        return Err(format!(
            "pattern {pattern:?}: lock names never contain braces, whitespace or control characters"
        ));
    }
    Ok(())
}

fn matches(pattern: &[char], text: &[char]) -> bool {
    let (mut p, mut t) = (0, 0);
    // Where the last `*` was, and the text position it is trying to cover up to.
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        let step = match pattern.get(p) {
            Some('*') => {
                star = Some((p, t));
                p += 1;
                continue;
            }
            Some('?') => Some(p + 1),
            Some('[') => class(pattern, p, text[t]),
            Some('\\') if p + 1 < pattern.len() => (pattern[p + 1] == text[t]).then_some(p + 2),
            Some(c) => (*c == text[t]).then_some(p + 1),
            None => None,
        };
        match (step, star) {
            (Some(next), _) => {
                p = next;
                t += 1;
            }
            (None, Some((sp, st))) => {
                // Let the last `*` cover one more character and try again.
                p = sp + 1;
                t = st + 1;
                star = Some((sp, st + 1));
            }
            (None, None) => return false,
        }
    }
    pattern[p..].iter().all(|c| *c == '*')
}

/// Matches `c` against the class starting at `pattern[open]` (`[`): the pattern position
/// after the class if it matches. An unclosed class runs to the end of the pattern, as in
/// Redis.
fn class(pattern: &[char], open: usize, c: char) -> Option<usize> {
    let mut i = open + 1;
    let negate = pattern.get(i) == Some(&'^');
    if negate {
        i += 1;
    }
    let mut found = false;
    while i < pattern.len() && pattern[i] != ']' {
        if pattern[i] == '\\' && i + 1 < pattern.len() {
            found |= pattern[i + 1] == c;
            i += 2;
        } else if i + 2 < pattern.len() && pattern[i + 1] == '-' && pattern[i + 2] != ']' {
            let (a, b) = (pattern[i], pattern[i + 2]);
            let (low, high) = if a <= b { (a, b) } else { (b, a) };
            found |= (low..=high).contains(&c);
            i += 3;
        } else {
            found |= pattern[i] == c;
            i += 1;
        }
    }
    (found != negate).then_some((i + 1).min(pattern.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_as_redis_does() {
        let yes = [
            ("*", ""),
            ("*", "order:42"),
            ("order:*", "order:42"),
            ("o*r:4?", "order:42"),
            ("*:42", "order:42"),
            ("a*b*c", "axxbyyc"),
            ("[abc]x", "bx"),
            ("[^abc]x", "dx"),
            ("[a-c]x", "cx"),
            ("[c-a]x", "bx"),
            ("\\*", "*"),
            ("[\\]]", "]"),
            ("订单:*", "订单:7"),
        ];
        for (pattern, text) in yes {
            assert!(Glob::new(pattern).matches(text), "{pattern} {text}");
        }
        let no = [
            ("order:*", "other:42"),
            ("?", ""),
            ("?", "ab"),
            ("a*b*c", "axxbyy"),
            ("[abc]x", "dx"),
            ("[^abc]x", "ax"),
            ("\\*", "a"),
            ("x", "xx"),
        ];
        for (pattern, text) in no {
            assert!(!Glob::new(pattern).matches(text), "{pattern} {text}");
        }
    }

    #[test]
    fn patterns_that_match_no_name_are_refused() {
        assert!(check_pattern("order:*").is_ok());
        for bad in ["", "a{b", "a b", "a}"] {
            assert!(check_pattern(bad).is_err(), "{bad:?}");
        }
    }
}
