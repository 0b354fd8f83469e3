//! Message properties: RocketMQ's `name 0x01 value 0x02` string.
//!
//! Producers send properties already encoded; the store keeps them as bytes and only reads a
//! few names (`TAGS`, `KEYS`, `UNIQ_KEY`). Parsing follows Java's `string2messageProperties`:
//! pairs are split on 0x02, name and value on the first 0x01, and pairs without a separator
//! are skipped rather than rejected, because real clients are not all careful.

/// Separates a property name from its value.
pub const NAME_VALUE_SEPARATOR: u8 = 0x01;
/// Ends each name/value pair.
pub const PROPERTY_SEPARATOR: u8 = 0x02;

/// Well-known property names (RocketMQ `MessageConst`).
pub mod names {
    /// The message tag, used for filtering; its Java hash is the ConsumeQueue tag code.
    pub const TAGS: &str = "TAGS";
    /// Space-separated business keys, indexed for `queryMsgByKey`.
    pub const KEYS: &str = "KEYS";
    /// The client-assigned unique id, indexed for `queryMsgByUniqueKey`.
    pub const UNIQ_KEY: &str = "UNIQ_KEY";
    /// Delay level of a scheduled message.
    pub const DELAY: &str = "DELAY";
    /// Whole-record CRC reserved at the end of the properties (see `record`).
    pub const CRC32: &str = "__CRC32#";
}

/// Room reserved per property by [`Properties::encode`]: `UNIQ_KEY` with its 32-digit id and
/// separators is 42 bytes, tags and `WAIT` fewer.
const ENCODED_PAIR_SIZE_TYPICAL: usize = 48;

/// A borrowed, encoded property string with lookups.
#[derive(Debug, Clone, Copy)]
pub struct Properties<'a>(pub &'a [u8]);

impl<'a> Properties<'a> {
    /// Iterates `(name, value)` pairs in stored order, skipping malformed pairs. Separators
    /// are found with `memchr` (a consumer reads every property of every message it
    /// receives; a byte-by-byte search was a tenth of its decoding).
    pub fn iter(&self) -> impl Iterator<Item = (&'a [u8], &'a [u8])> + 'a {
        let raw = self.0;
        memchr::memchr_iter(PROPERTY_SEPARATOR, raw)
            .chain(std::iter::once(raw.len()))
            .scan(0, move |from, to| {
                let pair = &raw[*from..to];
                *from = to + 1;
                Some(pair)
            })
            .filter_map(|pair| {
                let at = memchr::memchr(NAME_VALUE_SEPARATOR, pair)?;
                Some((&pair[..at], &pair[at + 1..]))
            })
    }

    /// The value of the first property called `name`, if any.
    pub fn get(&self, name: &str) -> Option<&'a [u8]> {
        self.iter()
            .find(|(n, _)| *n == name.as_bytes())
            .map(|(_, v)| v)
    }

    /// The value of `name` as UTF-8 text; `None` when absent or not UTF-8.
    pub fn get_str(&self, name: &str) -> Option<&'a str> {
        self.get(name).and_then(|v| std::str::from_utf8(v).ok())
    }

    /// The values of the first properties called `names[i]`, found in one scan; as
    /// [`Properties::get`] for each name.
    ///
    /// The dispatcher calls this for every record, so pairs are found with `memchr` and a
    /// pair is matched against a wanted name by its prefix: a pair belongs to `name` exactly
    /// when it starts with `name` followed by the separator, because property names contain
    /// no separator (the first separator of the pair then ends its name, as in `iter`).
    pub fn get_several<const N: usize>(&self, names: [&str; N]) -> [Option<&'a [u8]>; N] {
        debug_assert!(names
            .iter()
            .all(|n| !n.as_bytes().contains(&NAME_VALUE_SEPARATOR)));
        let mut found = [None; N];
        let mut missing = N;
        let raw = self.0;
        let mut from = 0;
        while from < raw.len() && missing > 0 {
            let to =
                memchr::memchr(PROPERTY_SEPARATOR, &raw[from..]).map_or(raw.len(), |at| from + at);
            let pair = &raw[from..to];
            for (wanted, slot) in names.iter().zip(found.iter_mut()) {
                if slot.is_none() {
                    if let Some(value) = value_if_named(pair, wanted.as_bytes()) {
                        *slot = Some(value);
                        missing -= 1;
                    }
                }
            }
            from = to + 1;
        }
        found
    }

    /// As [`Properties::get_several`], as UTF-8 text (`None` when absent or not UTF-8).
    pub fn get_strs<const N: usize>(&self, names: [&str; N]) -> [Option<&'a str>; N] {
        self.get_several(names)
            .map(|value| value.and_then(|v| std::str::from_utf8(v).ok()))
    }

    /// Encodes pairs the way Java's `messageProperties2String` does.
    pub fn encode<'p>(pairs: impl IntoIterator<Item = (&'p str, &'p str)>) -> Vec<u8> {
        let pairs = pairs.into_iter();
        // A typical send's properties (tags, WAIT, UNIQ_KEY) fit at once; growing from empty
        // reallocated three or four times per message.
        let mut out = Vec::with_capacity(pairs.size_hint().0 * ENCODED_PAIR_SIZE_TYPICAL);
        for (name, value) in pairs {
            out.extend_from_slice(name.as_bytes());
            out.push(NAME_VALUE_SEPARATOR);
            out.extend_from_slice(value.as_bytes());
            out.push(PROPERTY_SEPARATOR);
        }
        out
    }
}

/// The value of `pair` when its name is `name` (which holds no separator). The separator
/// after the name and the name's first byte are checked before the whole name is compared:
/// most pairs are told apart by one of them, without a `memcmp` call (the dispatcher reads
/// three names of every record).
fn value_if_named<'a>(pair: &'a [u8], name: &[u8]) -> Option<&'a [u8]> {
    if pair.get(name.len()) != Some(&NAME_VALUE_SEPARATOR) {
        return None;
    }
    // `pair` is longer than `name`, so it has a first byte whenever `name` has one.
    if name.first().is_some_and(|first| pair[0] != *first) {
        return None;
    }
    let (pair_name, value) = pair.split_at(name.len());
    (pair_name == name).then(|| &value[1..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_skips_malformed_pairs() {
        let mut raw = Properties::encode([("TAGS", "a"), ("KEYS", "k1 k2")]);
        raw.extend_from_slice(b"garbage\x02");
        let props = Properties(&raw);
        assert_eq!(props.get_str("TAGS"), Some("a"));
        assert_eq!(props.get_str("KEYS"), Some("k1 k2"));
        assert_eq!(props.get("garbage"), None);
        assert_eq!(props.iter().count(), 2);
    }

    proptest::proptest! {
        /// `iter` finds the pairs Java's split does: on every 0x02, then the first 0x01.
        #[test]
        fn iter_agrees_with_splitting_byte_by_byte(
            raw in proptest::collection::vec(proptest::sample::select(vec![0u8, 1, 2, b'A', b'z']), 0..40),
        ) {
            let expected: Vec<(&[u8], &[u8])> = raw
                .split(|b| *b == PROPERTY_SEPARATOR)
                .filter_map(|pair| {
                    let at = pair.iter().position(|b| *b == NAME_VALUE_SEPARATOR)?;
                    Some((&pair[..at], &pair[at + 1..]))
                })
                .collect();
            proptest::prop_assert_eq!(Properties(&raw).iter().collect::<Vec<_>>(), expected);
        }

        /// One scan for several names finds what one `get` per name finds: the first value,
        /// repeated, empty and absent names and malformed pairs included.
        #[test]
        fn get_several_agrees_with_get(
            pairs in proptest::collection::vec(("[ABK]{0,2}", "[a-z \x01]{0,4}"), 0..8),
            names in proptest::array::uniform3("[ABK]{0,2}"),
            garbage in proptest::bool::ANY,
        ) {
            let mut raw = Properties::encode(pairs.iter().map(|(n, v)| (n.as_str(), v.as_str())));
            if garbage {
                raw.extend_from_slice(b"KK\x02");
            }
            let props = Properties(&raw);
            let wanted = [names[0].as_str(), names[1].as_str(), names[2].as_str()];
            let expected = wanted.map(|name| props.get(name));
            proptest::prop_assert_eq!(props.get_several(wanted), expected);
            proptest::prop_assert_eq!(props.get_strs(wanted), wanted.map(|name| props.get_str(name)));
        }
    }

    #[test]
    fn value_may_contain_name_separator_after_the_first() {
        let raw = b"A\x01b\x01c\x02";
        assert_eq!(Properties(raw).get("A"), Some(&b"b\x01c"[..]));
    }
}
