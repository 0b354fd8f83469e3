//! `LanguageCode`: which client implementation sent a command.
//!
//! The JSON header carries the enum name, the ROCKETMQ binary header its byte. The value is
//! informational only (logs, connection lists, a CPP-shaped reset body), so decoding is lenient:
//! an unknown name or byte becomes [`LanguageCode::Other`] rather than failing the request.

/// RocketMQ's `LanguageCode`, in declaration order (the byte is the ordinal).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[allow(missing_docs)]
pub enum LanguageCode {
    #[default]
    Java,
    Cpp,
    Dotnet,
    Python,
    Delphi,
    Erlang,
    Ruby,
    Other,
    Http,
    Go,
    Php,
    Oms,
    Rust,
    NodeJs,
}

const ALL: [(LanguageCode, &str); 14] = [
    (LanguageCode::Java, "JAVA"),
    (LanguageCode::Cpp, "CPP"),
    (LanguageCode::Dotnet, "DOTNET"),
    (LanguageCode::Python, "PYTHON"),
    (LanguageCode::Delphi, "DELPHI"),
    (LanguageCode::Erlang, "ERLANG"),
    (LanguageCode::Ruby, "RUBY"),
    (LanguageCode::Other, "OTHER"),
    (LanguageCode::Http, "HTTP"),
    (LanguageCode::Go, "GO"),
    (LanguageCode::Php, "PHP"),
    (LanguageCode::Oms, "OMS"),
    (LanguageCode::Rust, "RUST"),
    (LanguageCode::NodeJs, "NODE_JS"),
];

impl LanguageCode {
    /// The byte used in the binary header (the Java ordinal).
    pub fn code(self) -> u8 {
        ALL.iter()
            .position(|(l, _)| *l == self)
            .map_or(7, |i| i as u8)
    }

    /// The enum name used in the JSON header.
    pub fn name(self) -> &'static str {
        ALL.iter()
            .find(|(l, _)| *l == self)
            .map_or("OTHER", |(_, n)| n)
    }

    /// Maps a byte to a language; `None` when RocketMQ defines no such code.
    pub fn from_code(code: u8) -> Option<Self> {
        ALL.get(code as usize).map(|(l, _)| *l)
    }

    /// Maps an enum name (case-insensitive) to a language.
    pub fn from_name(name: &str) -> Option<Self> {
        ALL.iter()
            .find(|(_, n)| n.eq_ignore_ascii_case(name.trim()))
            .map(|(l, _)| *l)
    }

    /// Like [`from_code`](Self::from_code), mapping unknown bytes to `Other`.
    pub fn from_code_lenient(code: u8) -> Self {
        Self::from_code(code).unwrap_or(LanguageCode::Other)
    }

    /// Like [`from_name`](Self::from_name), mapping unknown names to `Other`.
    pub fn from_name_lenient(name: &str) -> Self {
        Self::from_name(name).unwrap_or(LanguageCode::Other)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_and_names_round_trip() {
        for (i, (lang, name)) in ALL.iter().enumerate() {
            assert_eq!(lang.code() as usize, i);
            assert_eq!(lang.name(), *name);
            assert_eq!(LanguageCode::from_code(i as u8), Some(*lang));
            assert_eq!(LanguageCode::from_name(name), Some(*lang));
        }
        assert_eq!(LanguageCode::from_name("cpp"), Some(LanguageCode::Cpp));
        assert_eq!(LanguageCode::from_code_lenient(200), LanguageCode::Other);
        assert_eq!(
            LanguageCode::from_name_lenient("KOTLIN"),
            LanguageCode::Other
        );
    }
}
