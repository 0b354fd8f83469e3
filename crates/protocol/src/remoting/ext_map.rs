//! [`ExtFields`]: a command's ext fields, a small map of text keys to text values kept sorted
//! by key.
//!
//! Why not a `BTreeMap<String, String>`: a send carries about 13 ext fields and its reply 6,
//! and each map entry cost two heap strings plus the tree's nodes — about 30 allocations per
//! message on each side, and the largest share of the allocator's and the tree's time in a
//! profile of windowed sends. Here keys and values are [`ExtText`]s, stored inline up to 24
//! bytes (every key, and nearly every value but the message properties), in one `Vec`.
//!
//! Invariants:
//! 1. `entries` is sorted by key and holds each key once, so iteration is in key order (as a
//!    `BTreeMap`'s: the ACL signature and the JSON header rely on it) and lookups are a
//!    binary search.
//! 2. Each entry carries its key's first 8 bytes as a big-endian integer (zero-padded):
//!    comparing those orders keys as comparing the texts does whenever they differ, so most
//!    comparisons in a search or sort are one integer comparison (the byte comparison of
//!    short keys was the largest share of the map's time in a profile); keys of at most 8
//!    bytes with equal prefixes are ordered by their lengths, with no byte comparison.
//! 3. Bulk construction (`FromIterator`, `Extend`, [`ExtFields::from_pairs`]) sorts once and
//!    keeps the last value of a repeated key, as repeated inserts would; it never inserts one
//!    by one, so a hostile frame with millions of fields costs `n log n`, not `n²`.
//! 4. A map decoded from a binary header keeps the header's ext bytes (`raw`, checked when the
//!    frame was decoded) and builds `entries` from them only when first read as a map; while
//!    `raw` is kept it describes exactly the fields `entries` holds or will hold, and any
//!    change drops it. So a request whose handler reads only its typed header (a send, a
//!    pull) never builds the map: the header reads its fields from `raw` in one pass
//!    ([`ExtFields::binary`]), which is what `header!` does.
//!
//! Typed headers otherwise read their fields with [`ExtFields::ordered_lookup`] (declared in
//! key order, each field is found next to the previous one) and are written by inserts that
//! append when keys come in order.

use std::fmt;
use std::sync::OnceLock;

use compact_str::CompactString;
use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::binary_header::{binary_fields, CheckedExt};

/// An ext key or value: text stored inline up to 24 bytes, on the heap beyond.
pub type ExtText = CompactString;

/// A command's ext fields: key to text value, sorted by key (see the module doc).
#[derive(Clone, Default)]
pub struct ExtFields {
    /// The fields (invariant 1) when `raw` is `None`; empty while it is not.
    entries: Vec<Entry>,
    /// A binary header's fields not yet decoded (invariant 4). Boxed: a map built by hand (a
    /// reply's, a request's being written) pays one word for it, not a whole lazy map.
    raw: Option<Box<RawFields>>,
}

/// The ext bytes of a binary header, checked when the frame was decoded, and the map decoded
/// from them on first use as a map; a typed header reads its fields straight from the bytes
/// ([`ExtFields::binary`]).
#[derive(Debug, Clone)]
struct RawFields {
    bytes: CheckedExt,
    decoded: OnceLock<Vec<Entry>>,
}

impl RawFields {
    /// The map, decoded on first use (out of line: the hot paths read typed headers).
    #[inline(never)]
    fn entries(&self) -> &Vec<Entry> {
        self.decoded.get_or_init(|| entries_of_binary(&self.bytes))
    }
}

/// One field, with its key's ordering prefix (invariant 2).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Entry {
    prefix: u64,
    key: ExtText,
    value: ExtText,
}

impl Entry {
    fn new(key: ExtText, value: ExtText) -> Entry {
        Entry {
            prefix: prefix_of(&key),
            key,
            value,
        }
    }
}

/// The first 8 bytes of `key`, zero-padded, as a big-endian integer. If `prefix_of(a) <
/// prefix_of(b)` then `a < b`: at the first differing byte either both are real bytes, or
/// `a` has ended there (padding 0 against a byte of `b`), so `a` is a proper prefix of `b`.
fn prefix_of(key: &str) -> u64 {
    let bytes = key.as_bytes();
    match bytes.first_chunk::<8>() {
        Some(first) => u64::from_be_bytes(*first),
        // Short keys (most): shifted in byte by byte, no copy through memory.
        None => bytes
            .iter()
            .enumerate()
            .fold(0, |acc, (i, b)| acc | u64::from(*b) << (56 - 8 * i)),
    }
}

/// Orders `key` (with its `prefix`) against an entry's key, as the texts compare.
///
/// Equal prefixes of two keys of at most 8 bytes mean the shorter is the longer's first
/// bytes followed by nothing but zero bytes (the padding matched them), so it is a proper
/// prefix, or both are equal: comparing the lengths orders them as comparing the texts
/// would, with no byte comparison (every key a send carries is that short).
fn compare(entry: &Entry, prefix: u64, key: &str) -> std::cmp::Ordering {
    entry.prefix.cmp(&prefix).then_with(|| {
        let (theirs, ours) = (entry.key.len(), key.len());
        if theirs <= 8 && ours <= 8 {
            theirs.cmp(&ours)
        } else {
            entry.key.as_str().cmp(key)
        }
    })
}

impl ExtFields {
    /// An empty map.
    pub const fn new() -> ExtFields {
        ExtFields {
            entries: Vec::new(),
            raw: None,
        }
    }

    /// The map of a binary header's ext bytes, `raw`, which the caller checked
    /// (`binary_header::check_ext`): decoded only when first read as a map.
    pub(crate) fn from_binary(raw: CheckedExt) -> ExtFields {
        ExtFields {
            entries: Vec::new(),
            raw: Some(Box::new(RawFields {
                bytes: raw,
                decoded: OnceLock::new(),
            })),
        }
    }

    fn from_entries(entries: Vec<Entry>) -> ExtFields {
        ExtFields { entries, raw: None }
    }

    /// The binary ext bytes these fields were decoded from, while no change was made to them:
    /// a typed header reads its fields from these in one pass (`header!`), without building
    /// the map. Every key and value in them is UTF-8 (checked when the frame was decoded); a
    /// pair with an empty key or value is not a field.
    pub fn binary(&self) -> Option<&CheckedExt> {
        self.raw.as_deref().map(|raw| &raw.bytes)
    }

    /// The entries, decoding the binary ext bytes on first use.
    #[inline]
    fn entries(&self) -> &Vec<Entry> {
        match &self.raw {
            None => &self.entries,
            Some(raw) => raw.entries(),
        }
    }

    /// The entries for a change: decoded first if need be; the binary bytes no longer
    /// describe the map after it, so they are dropped.
    #[inline]
    fn entries_mut(&mut self) -> &mut Vec<Entry> {
        if self.raw.is_some() {
            self.decode_for_change();
        }
        &mut self.entries
    }

    /// Moves the decoded binary fields into `entries` and drops the bytes (out of line: the
    /// maps that change are built by hand, not decoded).
    #[cold]
    #[inline(never)]
    fn decode_for_change(&mut self) {
        if let Some(raw) = self.raw.take() {
            let RawFields { bytes, decoded } = *raw;
            self.entries = decoded
                .into_inner()
                .unwrap_or_else(|| entries_of_binary(&bytes));
        }
    }

    /// An empty map with room for `capacity` fields.
    pub fn with_capacity(capacity: usize) -> ExtFields {
        ExtFields::from_entries(Vec::with_capacity(capacity))
    }

    /// A map of `pairs` in any order; the last value of a repeated key wins.
    pub fn from_pairs(pairs: Vec<(ExtText, ExtText)>) -> ExtFields {
        let mut entries: Vec<Entry> = pairs.into_iter().map(|(k, v)| Entry::new(k, v)).collect();
        sort_keeping_last(&mut entries);
        ExtFields::from_entries(entries)
    }

    /// A map built from fields pushed in any order (a decoder's): one allocation of
    /// `capacity` entries, sorted once when built (invariant 3).
    pub fn builder(capacity: usize) -> ExtFieldsBuilder {
        ExtFieldsBuilder {
            entries: Vec::with_capacity(capacity),
        }
    }

    /// Number of fields.
    pub fn len(&self) -> usize {
        self.entries().len()
    }

    /// Whether there is no field.
    pub fn is_empty(&self) -> bool {
        self.entries().is_empty()
    }

    fn position(&self, key: &str) -> Result<usize, usize> {
        let prefix = prefix_of(key);
        self.entries()
            .binary_search_by(|entry| compare(entry, prefix, key))
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&ExtText> {
        self.position(key).ok().map(|i| &self.entries()[i].value)
    }

    /// The value of `key`, mutably.
    pub fn get_mut(&mut self, key: &str) -> Option<&mut ExtText> {
        let found = self.position(key).ok()?;
        Some(&mut self.entries_mut()[found].value)
    }

    /// Whether `key` is present.
    pub fn contains_key(&self, key: &str) -> bool {
        self.position(key).is_ok()
    }

    /// Sets `key` to `value`; returns the value it replaces.
    pub fn insert(
        &mut self,
        key: impl Into<ExtText>,
        value: impl Into<ExtText>,
    ) -> Option<ExtText> {
        let key = key.into();
        let value = value.into();
        // Headers are mostly written in key order: a key past the last one is pushed.
        let prefix = prefix_of(&key);
        let entries = self.entries_mut();
        if entries
            .last()
            .is_none_or(|last| compare(last, prefix, &key).is_lt())
        {
            entries.push(Entry { prefix, key, value });
            return None;
        }
        match self.position(&key) {
            Ok(i) => Some(std::mem::replace(&mut self.entries_mut()[i].value, value)),
            Err(i) => {
                self.entries_mut().insert(i, Entry::new(key, value));
                None
            }
        }
    }

    /// [`insert`](Self::insert) of borrowed text. A key past the last one (a header written in
    /// key order) is appended with its texts written in place (see
    /// [`ExtFieldsBuilder::push_str`]); any other goes through [`insert`](Self::insert).
    pub fn insert_str(&mut self, key: &str, value: &str) {
        let prefix = prefix_of(key);
        let entries = self.entries_mut();
        if entries
            .last()
            .is_none_or(|last| compare(last, prefix, key).is_lt())
        {
            push_in_place(entries, prefix, key, value);
        } else {
            self.insert(key, value);
        }
    }

    /// [`insert_str`](Self::insert_str) of an integer's decimal text.
    pub fn insert_int(&mut self, key: &str, value: impl itoa::Integer) {
        self.insert_str(key, itoa::Buffer::new().format(value));
    }

    /// Removes `key`; returns its value.
    pub fn remove(&mut self, key: &str) -> Option<ExtText> {
        let found = self.position(key).ok()?;
        Some(self.entries_mut().remove(found).value)
    }

    /// Keeps the fields `keep` returns true for.
    pub fn retain(&mut self, mut keep: impl FnMut(&ExtText, &mut ExtText) -> bool) {
        self.entries_mut()
            .retain_mut(|e| keep(&e.key, &mut e.value));
    }

    /// Lookups in ascending key order, each continuing where the last one ended (a typed
    /// header reads its fields that way): see [`OrderedLookup`].
    pub fn ordered_lookup(&self) -> OrderedLookup<'_> {
        OrderedLookup {
            entries: self.entries(),
            next: 0,
        }
    }

    /// The fields in key order.
    pub fn iter(&self) -> Iter<'_> {
        Iter {
            inner: self.entries().iter(),
        }
    }

    /// The keys in order.
    pub fn keys(&self) -> impl Iterator<Item = &ExtText> {
        self.entries().iter().map(|e| &e.key)
    }

    /// The values in key order.
    pub fn values(&self) -> impl Iterator<Item = &ExtText> {
        self.entries().iter().map(|e| &e.value)
    }
}

/// Looks keys up in an [`ExtFields`], fastest when they are asked for in ascending order:
/// a key found is usually the entry after the previous one found (one comparison), and a
/// search only covers the entries after it. A key asked for out of order is searched in
/// the whole map, so any order gives the same answers as [`ExtFields::get`].
#[derive(Debug)]
pub struct OrderedLookup<'a> {
    entries: &'a [Entry],
    /// Index after the entry the previous lookup found.
    next: usize,
}

impl<'a> OrderedLookup<'a> {
    /// The value of `key`.
    pub fn get(&mut self, key: &str) -> Option<&'a ExtText> {
        let prefix = prefix_of(key);
        let entries = self.entries;
        let from = self.next.min(entries.len());
        if let Some(entry) = entries.get(from) {
            if compare(entry, prefix, key).is_eq() {
                self.next = from + 1;
                return Some(&entry.value);
            }
        }
        // Out of order (the key sorts at or before the previous find): search everything.
        let after_previous = from == 0 || compare(&entries[from - 1], prefix, key).is_lt();
        let base = if after_previous { from } else { 0 };
        let found = entries[base..]
            .binary_search_by(|entry| compare(entry, prefix, key))
            .ok()?
            + base;
        self.next = found + 1;
        Some(&entries[found].value)
    }
}

/// Collects fields in any order for [`ExtFields::builder`].
#[derive(Debug)]
pub struct ExtFieldsBuilder {
    entries: Vec<Entry>,
}

impl ExtFieldsBuilder {
    /// Adds a field; a later push of the same key wins.
    pub fn push(&mut self, key: ExtText, value: ExtText) {
        self.entries.push(Entry::new(key, value));
    }

    /// [`push`](Self::push) of borrowed text, copied straight into the map's own entry.
    ///
    /// Why not `push(ExtText::from(key), …)`: a short text built on the stack is copied in
    /// with a variable-length `memcpy` and then moved as whole words, and those word loads
    /// cannot be served from the byte stores still in flight (a store-forwarding stall, four
    /// per field: most of a send header's decoding time). Written in place, a text is not read
    /// back until the map is sorted or searched. (One stall per field remains: the entry's
    /// own move into the vector; removing it would take unsafe writes into spare capacity,
    /// which measured no faster.)
    pub fn push_str(&mut self, key: &str, value: &str) {
        push_in_place(&mut self.entries, prefix_of(key), key, value);
    }

    /// The map.
    pub fn build(mut self) -> ExtFields {
        sort_keeping_last(&mut self.entries);
        ExtFields::from_entries(self.entries)
    }
}

/// Appends the field `key`: `value` as a new last entry, its texts written in place (see
/// [`ExtFieldsBuilder::push_str`]).
fn push_in_place(entries: &mut Vec<Entry>, prefix: u64, key: &str, value: &str) {
    let letter = one_letter_key(key);
    // The entry starts from clones of statics (copies of whole words), never from texts
    // built on the stack. A text too long to be inline is built whole: it is a heap
    // pointer, length and capacity, written and moved as words.
    entries.push(Entry {
        prefix,
        key: match letter {
            Some(at) => LETTER_KEYS[at].clone(),
            None if key.len() > INLINE_MAX => ExtText::from(key),
            None => EMPTY_TEXT.clone(),
        },
        value: if value.len() > INLINE_MAX {
            ExtText::from(value)
        } else {
            EMPTY_TEXT.clone()
        },
    });
    if let Some(entry) = entries.last_mut() {
        if letter.is_none() && key.len() <= INLINE_MAX {
            entry.key.push_str(key);
        }
        if value.len() <= INLINE_MAX {
            entry.value.push_str(value);
        }
    }
}

/// The longest text an [`ExtText`] holds inline.
const INLINE_MAX: usize = std::mem::size_of::<ExtText>();

/// The empty text, cloned to start a text that is then written in place.
static EMPTY_TEXT: ExtText = ExtText::const_new("");

macro_rules! letter_keys {
    ($($letter:ident)*) => { [$(ExtText::const_new(stringify!($letter))),*] };
}

/// The one-letter keys `a`..`z`: SEND_MESSAGE_V2's (`a`..`n`) and its batch form's, Java's
/// short names for the busiest request.
static LETTER_KEYS: [ExtText; 26] =
    letter_keys!(a b c d e f g h i j k l m n o p q r s t u v w x y z);

/// The index in [`LETTER_KEYS`] of a one-letter key.
fn one_letter_key(key: &str) -> Option<usize> {
    match key.as_bytes() {
        [letter @ b'a'..=b'z'] => Some(usize::from(letter - b'a')),
        _ => None,
    }
}

/// Sorts by key (stable) and keeps the last of each run of equal keys.
fn sort_keeping_last(entries: &mut Vec<Entry>) {
    // Decoded headers mostly arrive in key order without repeats (ferromq's and Java's
    // SEND_MESSAGE_V2 writers both do): one pass of comparisons then, no moves.
    if entries
        .windows(2)
        .all(|pair| compare(&pair[0], pair[1].prefix, &pair[1].key).is_lt())
    {
        return;
    }
    sort_keeping_last_by(entries, |a, b| compare(a, b.prefix, &b.key));
}

/// Sorts `items` by `order` (stable) and keeps the last of each run of equal items: a map
/// built by inserting them in turn. Shared with the JSON header's decoder.
pub(crate) fn sort_keeping_last_by<T>(
    items: &mut Vec<T>,
    order: impl Fn(&T, &T) -> std::cmp::Ordering,
) {
    items.sort_by(&order);
    // Reversed, `dedup_by` keeps the first of each run: the last inserted.
    items.reverse();
    items.dedup_by(|later, earlier| order(later, earlier).is_eq());
    items.reverse();
}

/// Borrowing iterator over `(key, value)` in key order.
pub struct Iter<'a> {
    inner: std::slice::Iter<'a, Entry>,
}

impl<'a> Iterator for Iter<'a> {
    type Item = (&'a ExtText, &'a ExtText);
    fn next(&mut self) -> Option<Self::Item> {
        self.inner.next().map(|e| (&e.key, &e.value))
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        self.inner.size_hint()
    }
}

impl ExactSizeIterator for Iter<'_> {}

impl<'a> IntoIterator for &'a ExtFields {
    type Item = (&'a ExtText, &'a ExtText);
    type IntoIter = Iter<'a>;
    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

impl IntoIterator for ExtFields {
    type Item = (ExtText, ExtText);
    type IntoIter = IntoIter;
    fn into_iter(mut self) -> IntoIter {
        IntoIter {
            inner: std::mem::take(self.entries_mut()).into_iter(),
        }
    }
}

/// Owning iterator over `(key, value)` in key order.
pub struct IntoIter {
    inner: std::vec::IntoIter<Entry>,
}

impl Iterator for IntoIter {
    type Item = (ExtText, ExtText);
    fn next(&mut self) -> Option<Self::Item> {
        self.inner.next().map(|e| (e.key, e.value))
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        self.inner.size_hint()
    }
}

impl<K: Into<ExtText>, V: Into<ExtText>> FromIterator<(K, V)> for ExtFields {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> ExtFields {
        ExtFields::from_pairs(
            iter.into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        )
    }
}

impl<K: Into<ExtText>, V: Into<ExtText>> Extend<(K, V)> for ExtFields {
    fn extend<I: IntoIterator<Item = (K, V)>>(&mut self, iter: I) {
        let entries = self.entries_mut();
        entries.extend(
            iter.into_iter()
                .map(|(k, v)| Entry::new(k.into(), v.into())),
        );
        sort_keeping_last(entries);
    }
}

impl<K: Into<ExtText>, V: Into<ExtText>, const N: usize> From<[(K, V); N]> for ExtFields {
    fn from(pairs: [(K, V); N]) -> ExtFields {
        pairs.into_iter().collect()
    }
}

/// `ext["key"]`, as a `BTreeMap` offers: panics when the key is absent, so for code that
/// knows it is there (tests); reads of network input use [`ExtFields::get`].
impl std::ops::Index<&str> for ExtFields {
    type Output = ExtText;
    fn index(&self, key: &str) -> &ExtText {
        match self.get(key) {
            Some(value) => value,
            None => panic!("ext field {key:?} is absent"),
        }
    }
}

/// Maps are equal when their fields are, however each was built (decoded or not).
impl PartialEq for ExtFields {
    fn eq(&self, other: &ExtFields) -> bool {
        self.entries() == other.entries()
    }
}

impl Eq for ExtFields {}

impl std::hash::Hash for ExtFields {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.entries().hash(state);
    }
}

/// The entries of checked binary ext bytes (see [`ExtFields::binary`]), sorted.
fn entries_of_binary(raw: &CheckedExt) -> Vec<Entry> {
    let mut entries = Vec::with_capacity(EXT_FIELDS_TYPICAL);
    for (key, value) in binary_fields(raw) {
        push_in_place(&mut entries, prefix_of(key), key, value);
    }
    sort_keeping_last(&mut entries);
    entries
}

/// Ext fields a decoded header has room for before its vector grows (a send carries about
/// 14: one allocation for them in the common case).
const EXT_FIELDS_TYPICAL: usize = 16;

impl fmt::Debug for ExtFields {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl Serialize for ExtFields {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.len()))?;
        for (k, v) in self {
            map.serialize_entry(k.as_str(), v.as_str())?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for ExtFields {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<ExtFields, D::Error> {
        struct FieldsVisitor;
        impl<'de> Visitor<'de> for FieldsVisitor {
            type Value = ExtFields;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object of strings")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ExtFields, A::Error> {
                let mut pairs = Vec::with_capacity(map.size_hint().unwrap_or(0).min(64));
                while let Some(pair) = map.next_entry::<ExtText, ExtText>()? {
                    pairs.push(pair);
                }
                Ok(ExtFields::from_pairs(pairs))
            }
        }
        deserializer.deserialize_map(FieldsVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iterates_in_key_order_whatever_the_insert_order() {
        let mut ext = ExtFields::new();
        for key in ["m", "a", "zz", "b", "a0"] {
            assert_eq!(ext.insert(key, format!("v-{key}")), None);
        }
        let keys: Vec<&str> = ext.keys().map(|k| k.as_str()).collect();
        assert_eq!(keys, ["a", "a0", "b", "m", "zz"]);
        assert_eq!(ext.get("zz").map(|v| v.as_str()), Some("v-zz"));
        assert_eq!(ext.get("c"), None);
    }

    #[test]
    fn insert_replaces_and_remove_takes_out() {
        let mut ext = ExtFields::from([("topic", "T1"), ("queueId", "3")]);
        assert_eq!(ext.insert("topic", "T2").as_deref(), Some("T1"));
        assert_eq!(ext.len(), 2);
        assert_eq!(ext.remove("queueId").as_deref(), Some("3"));
        assert_eq!(ext.remove("queueId"), None);
        assert!(!ext.contains_key("queueId"));
        assert_eq!(ext.get("topic").map(|v| v.as_str()), Some("T2"));
    }

    #[test]
    fn bulk_construction_keeps_the_last_value_of_a_repeated_key() {
        let ext: ExtFields = [("b", "1"), ("a", "x"), ("b", "2"), ("a", "y"), ("b", "3")]
            .into_iter()
            .collect();
        let pairs: Vec<(&str, &str)> = ext.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(pairs, [("a", "y"), ("b", "3")]);
        let mut more = ExtFields::from([("c", "0"), ("b", "0")]);
        more.extend([("b", "9"), ("d", "4")]);
        let pairs: Vec<(&str, &str)> = more.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(pairs, [("b", "9"), ("c", "0"), ("d", "4")]);
    }

    #[test]
    fn equals_a_btree_map_built_by_the_same_inserts() {
        use std::collections::BTreeMap;
        let ops = [
            ("k3", "a"),
            ("k1", "b"),
            ("k3", "c"),
            ("k2", ""),
            ("k1", "d"),
        ];
        let mut ext = ExtFields::new();
        let mut tree = BTreeMap::new();
        for (k, v) in ops {
            ext.insert(k, v);
            tree.insert(k.to_string(), v.to_string());
        }
        let ours: Vec<(String, String)> = ext
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let theirs: Vec<(String, String)> = tree.into_iter().collect();
        assert_eq!(ours, theirs);
    }

    #[test]
    fn json_round_trip_is_an_object_in_key_order() {
        let ext = ExtFields::from([("b", "2"), ("a", "1")]);
        let text = serde_json::to_string(&ext).unwrap();
        assert_eq!(text, r#"{"a":"1","b":"2"}"#);
        let back: ExtFields = serde_json::from_str(r#"{"b":"2","a":"0","a":"1"}"#).unwrap();
        assert_eq!(back, ext);
    }

    #[test]
    fn prefix_order_agrees_with_text_order() {
        let keys = [
            "",
            "a",
            "a\0",
            "a\0b",
            "ab",
            "abcdefgh",
            "abcdefgh\0",
            "abcdefghi",
            "abcdefgi",
            "b",
            "\u{7f}",
            "\u{e9}",
            "zzzzzzzzzzzz",
            "A",
            "AccessKey",
        ];
        for a in keys {
            for b in keys {
                let by_prefix = prefix_of(a).cmp(&prefix_of(b));
                if by_prefix != std::cmp::Ordering::Equal {
                    assert_eq!(by_prefix, a.cmp(b), "{a:?} vs {b:?}");
                }
                let entry = Entry::new(a.into(), ExtText::default());
                assert_eq!(compare(&entry, prefix_of(b), b), a.cmp(b), "{a:?} vs {b:?}");
            }
        }
    }

    #[test]
    fn short_texts_stay_inline() {
        let ext = ExtFields::from([("queueOffset", "1234567890123")]);
        assert!(!ext.get("queueOffset").unwrap().is_heap_allocated());
        assert!(!ext.keys().next().unwrap().is_heap_allocated());
    }

    proptest::proptest! {
        /// Any sequence of inserts and removes, and the same pairs built in bulk, leave the
        /// map as a `BTreeMap<String, String>` (the type it replaced) would be.
        #[test]
        fn behaves_as_a_btree_map(
            ops in proptest::collection::vec(
                (0..5u8, "[a-c\\x00]{0,10}", "[0-9]{0,30}"),
                0..60,
            )
        ) {
            use std::collections::BTreeMap;
            let mut ext = ExtFields::new();
            let mut tree = BTreeMap::new();
            let mut inserted = Vec::new();
            for (op, key, value) in &ops {
                if *op < 4 {
                    // Every other insert borrows its text (`insert_str`, in place when the
                    // key comes last), with no previous value to compare.
                    let previous = tree.insert(key.clone(), value.clone());
                    if op % 2 == 0 {
                        let ours = ext.insert(key.as_str(), value.as_str()).map(|v| v.to_string());
                        proptest::prop_assert_eq!(ours, previous);
                    } else {
                        ext.insert_str(key, value);
                    }
                    inserted.push((ExtText::from(key.as_str()), ExtText::from(value.as_str())));
                } else {
                    let ours = ext.remove(key).map(|v| v.to_string());
                    proptest::prop_assert_eq!(ours, tree.remove(key));
                }
                proptest::prop_assert_eq!(
                    ext.get(key).map(|v| v.to_string()),
                    tree.get(key).cloned()
                );
            }
            let ours: Vec<(String, String)> =
                ext.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
            let theirs: Vec<(String, String)> = tree.into_iter().collect();
            proptest::prop_assert_eq!(&ours, &theirs);
            let mut last_wins = BTreeMap::new();
            for (k, v) in &inserted {
                last_wins.insert(k.to_string(), v.to_string());
            }
            // The same pairs in key order (a stable sort keeps repeats in insert order), and
            // strictly in key order (as ferromq's client writes them), build the same map.
            let mut in_order = inserted.clone();
            in_order.sort_by(|a, b| a.0.cmp(&b.0));
            let mut strictly = in_order.clone();
            strictly.reverse();
            strictly.dedup_by(|later, earlier| later.0 == earlier.0);
            strictly.reverse();
            let expected: Vec<(String, String)> = last_wins.into_iter().collect();
            for pairs in [inserted, in_order, strictly] {
                // A decoder's builder, fed borrowed text, builds the same map.
                let mut builder = ExtFields::builder(4);
                for (k, v) in &pairs {
                    builder.push_str(k, v);
                }
                let built: Vec<(String, String)> = builder
                    .build()
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect();
                proptest::prop_assert_eq!(&built, &expected);
                let bulk: Vec<(String, String)> = ExtFields::from_pairs(pairs)
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect();
                proptest::prop_assert_eq!(&bulk, &expected);
            }
        }

        /// An integer inserted as text reads back as its decimal form, in key order or not.
        #[test]
        fn an_integer_is_stored_as_its_decimal_text(
            ints in proptest::collection::vec(("[a-z]{1,3}", proptest::num::i64::ANY), 0..20),
        ) {
            let mut ext = ExtFields::new();
            let mut tree = std::collections::BTreeMap::new();
            for (key, value) in &ints {
                ext.insert_int(key, *value);
                tree.insert(key.clone(), value.to_string());
            }
            let ours: Vec<(String, String)> =
                ext.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
            let theirs: Vec<(String, String)> = tree.into_iter().collect();
            proptest::prop_assert_eq!(ours, theirs);
        }

        /// An ordered lookup answers as `get` whatever order keys are asked in: ascending
        /// (a header's fields), with keys absent or repeated, and shuffled.
        #[test]
        fn an_ordered_lookup_answers_as_get(
            pairs in proptest::collection::vec(("[a-c\\x00]{0,10}", "[0-9]{0,3}"), 0..20),
            asked in proptest::collection::vec("[a-c\\x00]{0,10}", 0..30),
        ) {
            let ext: ExtFields = pairs
                .iter()
                .map(|(k, v)| (ExtText::from(k.as_str()), ExtText::from(v.as_str())))
                .collect();
            let mut sorted = asked.clone();
            sorted.sort();
            for order in [&asked, &sorted] {
                let mut lookup = ext.ordered_lookup();
                for key in order {
                    proptest::prop_assert_eq!(lookup.get(key), ext.get(key), "{:?}", key);
                }
            }
            let mut lookup = ext.ordered_lookup();
            for (key, _) in &ext {
                proptest::prop_assert_eq!(lookup.get(key), ext.get(key));
            }
        }
    }
}
