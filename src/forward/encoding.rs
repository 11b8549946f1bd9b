//! Compressed answers: the codings probity asks upstreams for and decodes
//! (gzip, br, zstd), which of them a client accepts, and the decode of a
//! whole body, bounded on its decoded size.
//!
//! A body is decoded once it is read whole, in pieces fed to the JSON
//! scanner, not as its compressed bytes arrive: a push decoder cannot bound
//! what one write gives back (a zstd block of four bytes may stand for
//! 128 KiB, brotli's ratio is larger still), and a pull decoder over the
//! bytes already held can stop at `max_response_bytes` exactly.

use std::io::Read;

use http::header::{HeaderMap, HeaderValue, ACCEPT_ENCODING, CONTENT_ENCODING};

/// A content coding probity decodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Coding {
    Gzip,
    Br,
    Zstd,
}

impl Coding {
    const ALL: [Coding; 3] = [Coding::Gzip, Coding::Br, Coding::Zstd];

    fn token(self) -> &'static str {
        match self {
            Coding::Gzip => "gzip",
            Coding::Br => "br",
            Coding::Zstd => "zstd",
        }
    }

    fn bit(self) -> u8 {
        match self {
            Coding::Gzip => 1,
            Coding::Br => 2,
            Coding::Zstd => 4,
        }
    }

    fn named(token: &str) -> Option<Coding> {
        // `x-gzip` is gzip (RFC 9110 §8.4.1.3).
        let token = token.trim();
        Coding::ALL
            .into_iter()
            .find(|c| token.eq_ignore_ascii_case(c.token()))
            .or_else(|| token.eq_ignore_ascii_case("x-gzip").then_some(Coding::Gzip))
    }
}

/// How a response body is encoded, read from its `Content-Encoding`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BodyCoding {
    /// None, or `identity`.
    Identity,
    /// One coding probity decodes.
    Known(Coding),
    /// Another coding, or several stacked: the bytes are judged as they
    /// came (and a JSON answer in them is then `invalid_json`).
    Other,
}

impl BodyCoding {
    pub(crate) fn of(headers: &HeaderMap) -> Self {
        let mut codings = headers
            .get_all(CONTENT_ENCODING)
            .iter()
            .flat_map(|v| v.to_str().map_or(vec!["?"], |s| s.split(',').collect()))
            .map(str::trim)
            .filter(|t| !t.is_empty() && !t.eq_ignore_ascii_case("identity"));
        match (codings.next(), codings.next()) {
            (None, _) => BodyCoding::Identity,
            (Some(one), None) => Coding::named(one).map_or(BodyCoding::Other, BodyCoding::Known),
            (Some(_), Some(_)) => BodyCoding::Other,
        }
    }
}

/// A set of the codings probity decodes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Codings(u8);

impl Codings {
    /// None: the upstream is asked for `identity`.
    pub(crate) const NONE: Codings = Codings(0);
    pub(crate) const ALL: Codings = Codings(7);

    /// Those the client's `Accept-Encoding` accepts (RFC 9110 §12.5.3): named
    /// with a weight above 0, or covered by a `*` above 0 and not refused
    /// by name. No header: none (identity is always acceptable).
    pub(crate) fn accepted_by(headers: &HeaderMap) -> Codings {
        let (mut named, mut refused, mut any) = (0u8, 0u8, false);
        let offers = headers
            .get_all(ACCEPT_ENCODING)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','));
        for offer in offers {
            let mut parts = offer.split(';');
            let token = parts.next().unwrap_or_default().trim();
            // `q=0` (or `0.0`, `0.000`) refuses it.
            let refuses = parts.any(|p| {
                let p = p.trim();
                let q = p.strip_prefix("q=").or_else(|| p.strip_prefix("Q="));
                q.is_some_and(|q| q.trim().parse::<f32>().is_ok_and(|q| q <= 0.0))
            });
            let bits = match Coding::named(token) {
                Some(coding) => coding.bit(),
                None if token == "*" => {
                    any = !refuses;
                    continue;
                }
                None => continue,
            };
            if refuses {
                refused |= bits;
            } else {
                named |= bits;
            }
        }
        let covered = if any { Codings::ALL.0 & !refused } else { 0 };
        Codings((named | covered) & !refused)
    }

    pub(crate) fn contains(self, coding: Coding) -> bool {
        self.0 & coding.bit() != 0
    }

    /// The `Accept-Encoding` asking the upstream for these: one of eight
    /// fixed values, so that no request allocates one.
    pub(crate) fn header(self) -> HeaderValue {
        HeaderValue::from_static(match self.0 & Codings::ALL.0 {
            0 => "identity",
            1 => "gzip",
            2 => "br",
            3 => "gzip, br",
            4 => "zstd",
            5 => "gzip, zstd",
            6 => "br, zstd",
            _ => "gzip, br, zstd",
        })
    }
}

/// Why a compressed body could not be decoded.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DecodeError {
    #[error("it decodes to more than {limit} bytes")]
    TooLarge { limit: u64 },
    #[error("its {coding} bytes do not decode ({cause})")]
    Corrupt { coding: &'static str, cause: String },
}

/// The piece of decoded bytes handed on at a time.
const PIECE: usize = 64 * 1024;

/// Decodes `raw`, handing the decoded bytes to `sink` piece by piece, and
/// stops as soon as they pass `limit`.
pub(crate) fn decode(
    coding: Coding,
    raw: &[u8],
    limit: u64,
    mut sink: impl FnMut(&[u8]),
) -> Result<(), DecodeError> {
    let mut reader: Box<dyn Read + '_> = match coding {
        // Several gzip members are one body (RFC 1952 §2.2).
        Coding::Gzip => Box::new(flate2::read::MultiGzDecoder::new(raw)),
        Coding::Br => Box::new(brotli_decompressor::Decompressor::new(raw, PIECE)),
        Coding::Zstd => match zstd::stream::read::Decoder::with_buffer(raw) {
            Ok(decoder) => Box::new(decoder),
            Err(err) => return Err(corrupt(coding, &err)),
        },
    };
    let mut total = 0u64;
    let mut buf = vec![0u8; PIECE];
    loop {
        let read = match reader.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(read) => read,
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(err) => return Err(corrupt(coding, &err)),
        };
        total += read as u64;
        if total > limit {
            return Err(DecodeError::TooLarge { limit });
        }
        sink(buf.get(..read).unwrap_or_default());
    }
}

fn corrupt(coding: Coding, err: &std::io::Error) -> DecodeError {
    DecodeError::Corrupt {
        coding: coding.token(),
        cause: err.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accepted(value: &str) -> Codings {
        let mut headers = HeaderMap::new();
        headers.insert(ACCEPT_ENCODING, HeaderValue::from_str(value).unwrap());
        Codings::accepted_by(&headers)
    }

    #[test]
    fn what_a_client_accepts_follows_its_weights() {
        assert_eq!(accepted("gzip, deflate, br").header(), "gzip, br");
        assert_eq!(accepted("gzip;q=0, br;q=0.5").header(), "br");
        assert_eq!(accepted("*").header(), "gzip, br, zstd");
        assert_eq!(accepted("*;q=0.1, zstd;q=0.000").header(), "gzip, br");
        assert_eq!(accepted("identity").header(), "identity");
        assert_eq!(accepted("*;q=0").header(), "identity");
        assert_eq!(accepted("GZIP ; Q=1.0").header(), "gzip");
        assert_eq!(Codings::accepted_by(&HeaderMap::new()), Codings::NONE);
        // Every set's header names its codings in one order.
        for bits in 0..8u8 {
            let named: Vec<&str> = Coding::ALL
                .into_iter()
                .filter(|c| Codings(bits).contains(*c))
                .map(Coding::token)
                .collect();
            let expected = if named.is_empty() {
                "identity".to_string()
            } else {
                named.join(", ")
            };
            assert_eq!(Codings(bits).header(), expected.as_str());
        }
    }

    #[test]
    fn a_body_names_one_coding_or_it_is_not_ours() {
        let coding = |value: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(CONTENT_ENCODING, HeaderValue::from_str(value).unwrap());
            BodyCoding::of(&headers)
        };
        assert_eq!(coding("gzip"), BodyCoding::Known(Coding::Gzip));
        assert_eq!(coding("x-gzip"), BodyCoding::Known(Coding::Gzip));
        assert_eq!(coding("ZSTD"), BodyCoding::Known(Coding::Zstd));
        assert_eq!(coding("identity"), BodyCoding::Identity);
        assert_eq!(coding("deflate"), BodyCoding::Other);
        assert_eq!(coding("gzip, br"), BodyCoding::Other);
        assert_eq!(BodyCoding::of(&HeaderMap::new()), BodyCoding::Identity);
    }

    #[test]
    fn a_bomb_stops_at_the_limit() {
        let zeros = vec![0u8; 4 << 20];
        let packed = zstd::stream::encode_all(&zeros[..], 19).unwrap();
        assert!(packed.len() < 1024, "{}", packed.len());
        let mut got = 0usize;
        let err = decode(Coding::Zstd, &packed, 1 << 20, |b| got += b.len()).unwrap_err();
        assert!(matches!(err, DecodeError::TooLarge { .. }), "{err}");
        assert!(got <= 1 << 20, "{got}");
        let mut whole = Vec::new();
        decode(Coding::Zstd, &packed, 4 << 20, |b| {
            whole.extend_from_slice(b)
        })
        .unwrap();
        assert_eq!(whole, zeros);
    }

    /// Any body, in either coding probity can encode here: decoded whole
    /// within its own length, refused one byte below it, and, with a byte
    /// flipped anywhere, an error or some bytes, never more than the limit
    /// and never a panic.
    #[test]
    fn every_body_decodes_within_its_limit_and_a_damaged_one_never_overruns() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let gzip = |body: &[u8]| {
            use std::io::Write;
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            e.write_all(body).unwrap();
            e.finish().unwrap()
        };
        for round in 0..120 {
            let len = (next() % 300_000) as usize;
            // Runs of one byte and noise: both compress, differently.
            let body: Vec<u8> = (0..len)
                .map(|i| {
                    if (i / 997) % 2 == 0 {
                        b'7'
                    } else {
                        next() as u8
                    }
                })
                .collect();
            let packed = if round % 2 == 0 {
                (Coding::Gzip, gzip(&body))
            } else {
                (
                    Coding::Zstd,
                    zstd::stream::encode_all(&body[..], 1).unwrap(),
                )
            };
            let (coding, packed) = packed;
            let mut whole = Vec::new();
            decode(coding, &packed, len as u64, |b| whole.extend_from_slice(b)).unwrap();
            assert_eq!(whole, body, "{coding:?}, {len} bytes");
            if len > 0 {
                let short = decode(coding, &packed, len as u64 - 1, |_| {});
                assert!(
                    matches!(short, Err(DecodeError::TooLarge { .. })),
                    "{coding:?}"
                );
            }
            let mut damaged = packed.clone();
            let at = (next() as usize) % damaged.len();
            damaged[at] ^= 1 << (next() % 8);
            let limit = (len / 2) as u64;
            let mut got = 0u64;
            let _ = decode(coding, &damaged, limit, |b| got += b.len() as u64);
            assert!(got <= limit, "{coding:?}: {got} > {limit}");
        }
    }
}
