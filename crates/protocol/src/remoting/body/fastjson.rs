//! Rewrites fastjson's non-standard JSON into standard JSON.
//!
//! Java's fastjson writes two kinds of object keys that are not JSON (reference §7.3):
//! unquoted integers (`{0:"a"}`, old route replies and `consumerOffset.json`) and whole objects
//! (`{{"topic":"T",...}:5}`, maps keyed by `MessageQueue`). [`normalize`] quotes the first and
//! turns the second into a string holding the object's JSON text, which `mq_map` reads back.
//! Everything else is copied unchanged, so standard JSON passes through as is.
//!
//! Invariants: never panics on any input; nesting deeper than [`MAX_DEPTH`] is an error, so
//! hostile input cannot exhaust the stack. The output is only guaranteed to be standard JSON
//! if the input was valid fastjson; the caller still parses it with serde_json.

use thiserror::Error;

/// Deepest nesting accepted.
pub const MAX_DEPTH: usize = 128;

/// Why text is not fastjson-style JSON.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum FastJsonError {
    /// An unexpected character.
    #[error("unexpected {found:?} at byte {at}")]
    Unexpected {
        /// Byte offset.
        at: usize,
        /// Character found.
        found: char,
    },
    /// The text ends inside a value.
    #[error("unexpected end of input")]
    UnexpectedEnd,
    /// Nesting deeper than [`MAX_DEPTH`].
    #[error("nesting deeper than {MAX_DEPTH}")]
    TooDeep,
}

/// Returns `input` as standard JSON (see the module documentation).
pub fn normalize(input: &str) -> Result<String, FastJsonError> {
    let mut p = Parser {
        src: input.as_bytes(),
        text: input,
        pos: 0,
        out: String::with_capacity(input.len() + 16),
        in_object_key: false,
    };
    p.ws();
    p.value(0)?;
    p.ws();
    if p.pos < p.src.len() {
        return Err(p.unexpected());
    }
    Ok(p.out)
}

struct Parser<'a> {
    src: &'a [u8],
    text: &'a str,
    pos: usize,
    out: String,
    /// Inside an object used as a key. fastjson's `MessageQueue` keys never nest, and a nested
    /// key would be escaped once per level (output doubling per level), so it is refused.
    in_object_key: bool,
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.src.get(self.pos).copied()
    }

    fn unexpected(&self) -> FastJsonError {
        match self.text.get(self.pos..).and_then(|s| s.chars().next()) {
            Some(found) => FastJsonError::Unexpected {
                at: self.pos,
                found,
            },
            None => FastJsonError::UnexpectedEnd,
        }
    }

    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.pos += 1;
        }
    }

    fn expect(&mut self, b: u8) -> Result<(), FastJsonError> {
        if self.peek() == Some(b) {
            self.pos += 1;
            self.out.push(b as char);
            Ok(())
        } else {
            Err(self.unexpected())
        }
    }

    fn value(&mut self, depth: usize) -> Result<(), FastJsonError> {
        if depth > MAX_DEPTH {
            return Err(FastJsonError::TooDeep);
        }
        match self.peek() {
            Some(b'{') => self.object(depth + 1),
            Some(b'[') => self.array(depth + 1),
            Some(b'"') => self.string(),
            Some(_) => self.scalar(),
            None => Err(FastJsonError::UnexpectedEnd),
        }
    }

    fn object(&mut self, depth: usize) -> Result<(), FastJsonError> {
        // Objects are also reached through keys (`key` -> `object`), not only through `value`.
        if depth > MAX_DEPTH {
            return Err(FastJsonError::TooDeep);
        }
        self.expect(b'{')?;
        self.ws();
        if self.peek() == Some(b'}') {
            return self.expect(b'}');
        }
        loop {
            self.key(depth)?;
            self.ws();
            self.expect(b':')?;
            self.ws();
            self.value(depth)?;
            self.ws();
            match self.peek() {
                Some(b',') => {
                    self.expect(b',')?;
                    self.ws();
                }
                Some(b'}') => return self.expect(b'}'),
                _ => return Err(self.unexpected()),
            }
        }
    }

    fn key(&mut self, depth: usize) -> Result<(), FastJsonError> {
        match self.peek() {
            Some(b'"') => self.string(),
            Some(b'{') if self.in_object_key => Err(self.unexpected()),
            Some(b'{') => {
                let outer = std::mem::take(&mut self.out);
                self.in_object_key = true;
                let inner = self.object(depth + 1);
                self.in_object_key = false;
                let key_text = std::mem::replace(&mut self.out, outer);
                inner?;
                self.out.push_str(&quote(&key_text));
                Ok(())
            }
            Some(b'-' | b'0'..=b'9') => {
                let start = self.pos;
                self.pos += 1;
                while let Some(b'0'..=b'9') = self.peek() {
                    self.pos += 1;
                }
                let digits = self.text.get(start..self.pos).unwrap_or_default();
                if digits == "-" {
                    return Err(self.unexpected());
                }
                self.out.push('"');
                self.out.push_str(digits);
                self.out.push('"');
                Ok(())
            }
            _ => Err(self.unexpected()),
        }
    }

    fn array(&mut self, depth: usize) -> Result<(), FastJsonError> {
        self.expect(b'[')?;
        self.ws();
        if self.peek() == Some(b']') {
            return self.expect(b']');
        }
        loop {
            self.value(depth)?;
            self.ws();
            match self.peek() {
                Some(b',') => {
                    self.expect(b',')?;
                    self.ws();
                }
                Some(b']') => return self.expect(b']'),
                _ => return Err(self.unexpected()),
            }
        }
    }

    /// Copies a string literal unchanged, escapes included.
    fn string(&mut self) -> Result<(), FastJsonError> {
        let start = self.pos;
        self.pos += 1;
        loop {
            match self.peek() {
                None => return Err(FastJsonError::UnexpectedEnd),
                Some(b'\\') => self.pos += 2,
                Some(b'"') => {
                    self.pos += 1;
                    break;
                }
                Some(_) => self.pos += 1,
            }
        }
        let lit = self
            .text
            .get(start..self.pos)
            .ok_or(FastJsonError::UnexpectedEnd)?;
        self.out.push_str(lit);
        Ok(())
    }

    /// Copies a number or literal (`true`, `false`, `null`) up to the next delimiter.
    fn scalar(&mut self) -> Result<(), FastJsonError> {
        let start = self.pos;
        while let Some(b) = self.peek() {
            if matches!(b, b',' | b'}' | b']' | b':' | b' ' | b'\t' | b'\n' | b'\r') {
                break;
            }
            if !(b.is_ascii_alphanumeric() || matches!(b, b'-' | b'+' | b'.')) {
                return Err(self.unexpected());
            }
            self.pos += 1;
        }
        if self.pos == start {
            return Err(self.unexpected());
        }
        let lit = self
            .text
            .get(start..self.pos)
            .ok_or(FastJsonError::UnexpectedEnd)?;
        self.out.push_str(lit);
        Ok(())
    }
}

fn quote(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| String::from("\"\""))
}

#[cfg(test)]
mod tests {
    use super::*;

    // Found by `cargo fuzz` (fuzz/regressions/json_bodies): object keys recursed past the depth
    // check and overflowed the stack at about 10,000 `{`.
    #[test]
    fn nested_object_keys_hit_the_depth_limit() {
        assert!(normalize(&"{".repeat(100_000)).is_err());
    }

    // Found by `cargo fuzz`: each nested object key escaped its text again, doubling the output
    // per level (118 input bytes asked for 2 GiB).
    #[test]
    fn nested_object_keys_are_refused_instead_of_blowing_up() {
        let n = 40;
        let input = format!("{}}}{}", "{".repeat(n), ":0}".repeat(n - 1));
        assert!(normalize(&input).is_err());
        // One level, as fastjson writes MessageQueue keys, still works.
        let one = normalize(r#"{{"topic":"T","queueId":0}:5}"#).unwrap();
        assert!(serde_json::from_str::<serde_json::Value>(&one).is_ok());
    }

    #[test]
    fn quotes_integer_keys() {
        let n = normalize(r#"{"offsetTable":{"T@G":{0:12,1:7, -1 : 3}}}"#).unwrap();
        assert_eq!(n, r#"{"offsetTable":{"T@G":{"0":12,"1":7,"-1":3}}}"#);
        let v: serde_json::Value = serde_json::from_str(&n).unwrap();
        assert_eq!(v["offsetTable"]["T@G"]["1"], 7);
    }

    #[test]
    fn object_keys_become_strings() {
        let n = normalize(
            r#"{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:{"maxOffset":5}}}"#,
        )
        .unwrap();
        let v: serde_json::Value = serde_json::from_str(&n).unwrap();
        let (k, val) = v["offsetTable"].as_object().unwrap().iter().next().unwrap();
        assert_eq!(k, r#"{"brokerName":"b","queueId":0,"topic":"T"}"#);
        assert_eq!(val["maxOffset"], 5);
    }

    #[test]
    fn standard_json_unchanged_and_garbage_rejected() {
        let s = r#"{"a":[1,2.5e3,true,null,"x\"y"],"b":{}}"#;
        assert_eq!(normalize(s).unwrap(), s);
        assert!(normalize("{").is_err());
        assert!(normalize("{a:1}").is_err());
        assert!(normalize(r#"{"a":1}x"#).is_err());
        assert!(normalize(r#""\"#).is_err());
        assert_eq!(normalize(&"[".repeat(1000)), Err(FastJsonError::TooDeep));
    }
}
