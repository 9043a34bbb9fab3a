//! Redis's glob-style pattern matching (`stringmatchlen` in Redis's `util.c`), used by
//! PSUBSCRIBE and `PUBSUB CHANNELS`, `KEYS` and the `SCAN` family's `MATCH`, and `CONFIG
//! GET`: `*` any run of bytes, `?` one byte,
//! `[abc]` / `[^abc]` / `[a-z]` a byte of (not of) a class, `\x` the byte `x`.
//!
//! Byte for byte what Redis does, quirks included: an unclosed `[` ends at the pattern's
//! end, a range may be written backwards (`[z-a]`), and range bounds compare as C's
//! signed `char` (bytes from 0x80 sort below ASCII). Recursion (one level per `*`) is
//! capped at [`MAX_NESTING`] levels; a pattern that needs more does not match.

/// Deepest recursion a match may take (one level per `*` in the pattern).
pub(crate) const MAX_NESTING: usize = 1000;

/// True if key (or field, or member) `s` matches `pattern` as `KEYS` and the `SCAN`
/// family decide: the pattern `*` takes everything without matching (so it takes the
/// empty key too, which [`matches`] would not, as in Redis).
pub(crate) fn matches_key(pattern: &[u8], s: &[u8]) -> bool {
    pattern == b"*" || matches(pattern, s)
}

/// True if `string` matches the glob `pattern`.
pub(crate) fn matches(pattern: &[u8], string: &[u8]) -> bool {
    let mut skip_longer = false;
    match_impl(pattern, string, &mut skip_longer, 0)
}

fn match_impl(mut p: &[u8], mut s: &[u8], skip_longer: &mut bool, nesting: usize) -> bool {
    if nesting > MAX_NESTING {
        return false;
    }
    while !p.is_empty() && !s.is_empty() {
        match p[0] {
            b'*' => {
                while p.len() > 1 && p[1] == b'*' {
                    p = &p[1..];
                }
                if p.len() == 1 {
                    return true;
                }
                while !s.is_empty() {
                    if match_impl(&p[1..], s, skip_longer, nesting + 1) {
                        return true;
                    }
                    if *skip_longer {
                        return false;
                    }
                    s = &s[1..];
                }
                // No tail of the string matches the rest: a longer string won't either.
                *skip_longer = true;
                return false;
            }
            b'?' => s = &s[1..],
            b'[' => {
                p = &p[1..];
                let not = p.first() == Some(&b'^');
                if not {
                    p = &p[1..];
                }
                let c = s[0];
                let mut matched = false;
                // `i` walks the class; it stops on its `]` or, unclosed, on its last byte.
                let mut i = 0;
                loop {
                    if i >= p.len() {
                        // Unclosed: Redis steps back onto the last byte of the pattern.
                        i = p.len().saturating_sub(1);
                        break;
                    }
                    if p[i] == b'\\' && p.len() - i >= 2 {
                        i += 1;
                        if p[i] == c {
                            matched = true;
                        }
                    } else if p[i] == b']' {
                        break;
                    } else if p.len() - i >= 3 && p[i + 1] == b'-' {
                        let (mut lo, mut hi) = (p[i] as i8, p[i + 2] as i8);
                        if lo > hi {
                            std::mem::swap(&mut lo, &mut hi);
                        }
                        let ci = c as i8;
                        if ci >= lo && ci <= hi {
                            matched = true;
                        }
                        i += 2;
                    } else if p[i] == c {
                        matched = true;
                    }
                    i += 1;
                }
                if not {
                    matched = !matched;
                }
                if !matched {
                    return false;
                }
                p = &p[i.min(p.len())..];
                s = &s[1..];
            }
            b'\\' => {
                if p.len() >= 2 {
                    p = &p[1..];
                }
                if p[0] != s[0] {
                    return false;
                }
                s = &s[1..];
            }
            other => {
                if other != s[0] {
                    return false;
                }
                s = &s[1..];
            }
        }
        // Past the byte (or class, or escape) just matched.
        if !p.is_empty() {
            p = &p[1..];
        }
        if s.is_empty() {
            while p.first() == Some(&b'*') {
                p = &p[1..];
            }
            break;
        }
    }
    p.is_empty() && s.is_empty()
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn stars_and_question_marks() {
        // Redis: `*` does not match the empty string (PUBSUB CHANNELS * omits "").
        assert!(!matches(b"*", b""));
        assert!(matches(b"*", b"anything"));
        assert!(matches(b"news.*", b"news.sport"));
        assert!(matches(b"news.*", b"news."));
        assert!(!matches(b"news.*", b"news"));
        assert!(matches(b"h?llo", b"hello"));
        assert!(!matches(b"h?llo", b"hllo"));
        assert!(matches(b"h*llo", b"hllo"));
        assert!(matches(b"h*llo", b"heeeello"));
        assert!(matches(b"a**b", b"ab"));
        assert!(matches(b"*a*b*", b"xxaxxbxx"));
        assert!(!matches(b"*a*b*", b"xxbxxaxx"));
        assert!(!matches(b"", b"x"));
        assert!(matches(b"", b""));
        assert!(!matches(b"?", b""));
    }

    #[test]
    fn classes() {
        assert!(matches(b"h[ae]llo", b"hello"));
        assert!(matches(b"h[ae]llo", b"hallo"));
        assert!(!matches(b"h[ae]llo", b"hillo"));
        assert!(matches(b"h[^e]llo", b"hallo"));
        assert!(!matches(b"h[^e]llo", b"hello"));
        assert!(matches(b"h[a-b]llo", b"hbllo"));
        assert!(matches(b"h[b-a]llo", b"hallo"), "a backwards range");
        assert!(!matches(b"h[a-b]llo", b"hcllo"));
        assert!(matches(b"[\\]]", b"]"));
        // `[a-]` is the range 'a'..']' (Redis reads the `]` as the range's end).
        assert!(!matches(b"[a-]", b"-"));
    }

    #[test]
    fn escapes() {
        assert!(matches(b"a\\*b", b"a*b"));
        assert!(!matches(b"a\\*b", b"axb"));
        assert!(matches(b"a\\?", b"a?"));
        assert!(matches(b"\\", b"\\"), "a lone trailing backslash is itself");
    }

    #[test]
    fn redis_quirks() {
        // An unclosed class ends at the pattern's end, its last byte still a member.
        assert!(matches(b"[ab", b"b"));
        assert!(matches(b"[ab", b"a"));
        assert!(!matches(b"[ab", b"c"));
        // Bytes from 0x80 compare as negative C chars: below 'a'.
        assert!(matches(b"[\x80-a]", b"Z"));
        assert!(!matches(b"[a-\xff]", b"z"));
    }

    #[test]
    fn pathological_patterns_end_quickly() {
        let pattern = b"a*".repeat(40);
        let mut p = pattern.clone();
        p.push(b'b');
        let s = vec![b'a'; 60];
        let t = std::time::Instant::now();
        assert!(!matches(&p, &s));
        assert!(t.elapsed() < std::time::Duration::from_secs(1));
        let deep = b"*a".repeat(super::MAX_NESTING + 10);
        let s = vec![b'a'; super::MAX_NESTING + 10];
        assert!(!matches(&deep, &s), "deeper than the cap: no match");
    }

    #[test]
    fn keys_and_scans_take_every_key_with_a_lone_star() {
        use super::matches_key;
        assert!(matches_key(b"*", b""));
        assert!(!matches(b"*", b""));
        assert!(matches_key(b"user:*", b"user:"));
        assert!(!matches_key(b"user:*", b"use"));
    }

    #[test]
    fn hostile_patterns_stay_fast() {
        // Exponential backtracking would not finish: these return at once.
        let pattern = "*a".repeat(50) + "b";
        assert!(!matches(pattern.as_bytes(), "a".repeat(5000).as_bytes()));
        assert!(!matches(b"*a*a*a*a*a*a*a*a*b", &[b'a'; 5000]));
        assert!(matches(&[b'*'; 200], b"short"));
    }

    #[test]
    fn classes_escapes_and_literals_as_redis() {
        let yes: &[(&str, &str)] = &[
            ("a*", "abc"),
            ("*c", "abc"),
            ("a?c", "abc"),
            ("h[ae]llo", "hello"),
            ("h[^e]llo", "hallo"),
            ("h[a-b]llo", "hbllo"),
            ("h[b-a]llo", "hallo"),
            ("a\\*b", "a*b"),
            ("*:*:x", "u:1:x"),
            ("*a*b*", "xxaxxbxx"),
            ("", ""),
            ("a*", "a"),
        ];
        for (p, s) in yes {
            assert!(matches(p.as_bytes(), s.as_bytes()), "{p} should match {s}");
        }
        let no: &[(&str, &str)] = &[
            ("a*", "bac"),
            ("a?c", "ac"),
            ("h[ae]llo", "hillo"),
            ("h[^e]llo", "hello"),
            ("a\\*b", "axb"),
            ("abc", "abcd"),
            ("", "a"),
            ("?", ""),
            ("a?", "a"),
        ];
        for (p, s) in no {
            assert!(
                !matches(p.as_bytes(), s.as_bytes()),
                "{p} should not match {s}"
            );
        }
    }
}
