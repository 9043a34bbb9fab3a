//! Redis's glob patterns (`KEYS`, `SCAN … MATCH`, `SSCAN … MATCH`): `*`, `?`, `[abc]`,
//! `[^a-z]`, `\x` — byte-wise, as Redis's `stringmatchlen` (case-sensitive).

/// True if `s` matches `pattern`. Iterative with one backtracking point per `*` (the
/// classic greedy algorithm), so a hostile pattern costs O(|pattern| × |s|), never more.
pub(crate) fn matches(pattern: &[u8], s: &[u8]) -> bool {
    let (mut p, mut i) = (0usize, 0usize);
    // Where to resume after the last `*`: (pattern index after it, string index).
    let mut star: Option<(usize, usize)> = None;
    loop {
        if p < pattern.len() {
            match pattern[p] {
                b'*' => {
                    star = Some((p + 1, i));
                    p += 1;
                    continue;
                }
                b'?' if i < s.len() => {
                    p += 1;
                    i += 1;
                    continue;
                }
                b'[' if i < s.len() => {
                    if let Some((ok, next)) = class(pattern, p, s[i]) {
                        if ok {
                            p = next;
                            i += 1;
                            continue;
                        }
                    }
                }
                b'\\' if p + 1 < pattern.len() && i < s.len() && pattern[p + 1] == s[i] => {
                    p += 2;
                    i += 1;
                    continue;
                }
                // A literal byte (a trailing `\` is one, as in Redis).
                c if c != b'?'
                    && c != b'['
                    && !(c == b'\\' && p + 1 < pattern.len())
                    && i < s.len()
                    && c == s[i] =>
                {
                    p += 1;
                    i += 1;
                    continue;
                }
                _ => {}
            }
        } else if i == s.len() {
            return true;
        }
        // Mismatch: let the last `*` swallow one more byte.
        match star {
            Some((sp, si)) if si < s.len() => {
                star = Some((sp, si + 1));
                p = sp;
                i = si + 1;
            }
            _ => return false,
        }
    }
}

/// The class starting at `pattern[p] == b'['` against byte `c`: (matched, index after
/// the class). An unterminated class runs to the end of the pattern, as in Redis.
fn class(pattern: &[u8], p: usize, c: u8) -> Option<(bool, usize)> {
    let mut j = p + 1;
    let negate = pattern.get(j) == Some(&b'^');
    if negate {
        j += 1;
    }
    let mut hit = false;
    while j < pattern.len() && pattern[j] != b']' {
        if pattern[j] == b'\\' && j + 1 < pattern.len() {
            hit |= pattern[j + 1] == c;
            j += 2;
        } else if j + 2 < pattern.len() && pattern[j + 1] == b'-' && pattern[j + 2] != b']' {
            let (lo, hi) = (
                pattern[j].min(pattern[j + 2]),
                pattern[j].max(pattern[j + 2]),
            );
            hit |= (lo..=hi).contains(&c);
            j += 3;
        } else {
            hit |= pattern[j] == c;
            j += 1;
        }
    }
    // Past the closing bracket (or the end).
    Some((hit != negate, (j + 1).min(pattern.len())))
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn globs_match_as_redis() {
        let yes = [
            ("*", ""),
            ("*", "abc"),
            ("a*", "abc"),
            ("*c", "abc"),
            ("a?c", "abc"),
            ("h[ae]llo", "hello"),
            ("h[^e]llo", "hallo"),
            ("h[a-b]llo", "hbllo"),
            ("h[b-a]llo", "hallo"),
            ("a\\*b", "a*b"),
            ("*:*:x", "u:1:x"),
            ("user:*", "user:"),
        ];
        for (p, s) in yes {
            assert!(matches(p.as_bytes(), s.as_bytes()), "{p} should match {s}");
        }
        let no = [
            ("a*", "bac"),
            ("a?c", "ac"),
            ("h[ae]llo", "hillo"),
            ("h[^e]llo", "hello"),
            ("a\\*b", "axb"),
            ("\\a", "\\"),
            ("abc", "abcd"),
            ("", "a"),
            ("?", ""),
        ];
        for (p, s) in no {
            assert!(
                !matches(p.as_bytes(), s.as_bytes()),
                "{p} should not match {s}"
            );
        }
    }

    #[test]
    fn many_stars_stay_linear() {
        let pattern = "*a".repeat(50) + "b";
        let s = "a".repeat(5000);
        assert!(!matches(pattern.as_bytes(), s.as_bytes()));
    }
}
