//! [`Args`]: the arguments of a parsed command, as spans of the input or of a scratch buffer.

use std::ops::Range;

/// Where one argument's bytes are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Span {
    /// `buf[start..end]` of the buffer given to [`parse_command`](super::parse_command).
    Input { start: usize, end: usize },
    /// `scratch[start..end]` of the [`Args`] itself (a decoded quoted inline argument).
    Scratch { start: usize, end: usize },
}

/// The arguments of the last command parsed by [`parse_command`](super::parse_command); keep one per connection and
/// reuse it, so parsing allocates nothing once its vectors have grown.
///
/// Arguments are read with the buffer that was passed to [`parse_command`](super::parse_command) (see the
/// [module docs](super)); with another buffer, [`get`](Args::get) returns `None` for arguments
/// that do not fit in it.
#[derive(Clone, Debug, Default)]
pub struct Args {
    pub(super) spans: Vec<Span>,
    pub(super) scratch: Vec<u8>,
}

impl Args {
    /// An empty `Args`.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty `Args` with room for `n` arguments before it allocates.
    pub fn with_capacity(n: usize) -> Self {
        Args {
            spans: Vec::with_capacity(n),
            scratch: Vec::new(),
        }
    }

    /// Number of arguments (the command name included).
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    /// Whether there are no arguments (an empty command, which the caller skips).
    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// Removes all arguments, keeping the allocated capacity.
    pub fn clear(&mut self) {
        self.spans.clear();
        self.scratch.clear();
    }

    /// Releases memory kept from an unusually large command: afterwards there is room for at
    /// most about `args` arguments and `scratch_bytes` bytes of decoded inline arguments
    /// (the current arguments are kept).
    pub fn shrink_to(&mut self, args: usize, scratch_bytes: usize) {
        self.spans.shrink_to(args);
        self.scratch.shrink_to(scratch_bytes);
    }

    /// The bytes of argument `i`, where `buf` is the buffer the command was parsed from; `None`
    /// if `i >= len()` (or `buf` is not that buffer and is too short).
    pub fn get<'a>(&'a self, buf: &'a [u8], i: usize) -> Option<&'a [u8]> {
        self.spans.get(i).and_then(|span| self.resolve(buf, span))
    }

    /// The range of `buf` holding argument `i`, if it is stored verbatim in the input (always
    /// the case for multibulk commands; not for quoted inline arguments, whose escapes were
    /// decoded). Useful for zero-copy slicing of a shared buffer.
    pub fn range(&self, i: usize) -> Option<Range<usize>> {
        match self.spans.get(i)? {
            Span::Input { start, end } => Some(*start..*end),
            Span::Scratch { .. } => None,
        }
    }

    /// Iterates over the arguments' bytes, where `buf` is the buffer the command was parsed
    /// from (an argument that does not fit in `buf` reads as empty).
    pub fn iter<'a>(&'a self, buf: &'a [u8]) -> ArgsIter<'a> {
        ArgsIter {
            args: self,
            buf,
            spans: self.spans.iter(),
        }
    }

    fn resolve<'a>(&'a self, buf: &'a [u8], span: &Span) -> Option<&'a [u8]> {
        match *span {
            Span::Input { start, end } => buf.get(start..end),
            Span::Scratch { start, end } => self.scratch.get(start..end),
        }
    }

    pub(super) fn push_input(&mut self, start: usize, end: usize) {
        self.spans.push(Span::Input { start, end });
    }
}

/// Iterator over the arguments of an [`Args`], from [`Args::iter`].
#[derive(Clone, Debug)]
pub struct ArgsIter<'a> {
    args: &'a Args,
    buf: &'a [u8],
    spans: std::slice::Iter<'a, Span>,
}

impl<'a> Iterator for ArgsIter<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        let span = self.spans.next()?;
        Some(self.args.resolve(self.buf, span).unwrap_or_default())
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.spans.size_hint()
    }
}

impl ExactSizeIterator for ArgsIter<'_> {}
