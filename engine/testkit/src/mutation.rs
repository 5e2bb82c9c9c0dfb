//! Edits of valid encodings for the fuzzing tests: flips, sets, insertions,
//! cuts and growth, applied in order. Shared by the engine's decoder test,
//! the proto's strict check and the server's request tests, so all mutate
//! bytes the same way.

use proptest::collection::vec;
use proptest::prelude::*;

/// One edit of a byte string.
#[derive(Clone, Debug)]
pub enum Edit {
    Flip { at: usize, bits: u8 },
    Set { at: usize, to: u8 },
    Insert { at: usize, bytes: Vec<u8> },
    Cut { at: usize },
    Grow { by: Vec<u8> },
}

/// One to five edits.
pub fn edits() -> impl Strategy<Value = Vec<Edit>> {
    let edit = prop_oneof![
        (any::<usize>(), 1u8..).prop_map(|(at, bits)| Edit::Flip { at, bits }),
        (any::<usize>(), any::<u8>()).prop_map(|(at, to)| Edit::Set { at, to }),
        (any::<usize>(), vec(any::<u8>(), 1..16))
            .prop_map(|(at, bytes)| Edit::Insert { at, bytes }),
        any::<usize>().prop_map(|at| Edit::Cut { at }),
        vec(any::<u8>(), 1..64).prop_map(|by| Edit::Grow { by }),
    ];
    vec(edit, 1..6)
}

/// Applies `edits` to `bytes`; positions wrap around its length.
pub fn apply(bytes: &mut Vec<u8>, edits: &[Edit]) {
    for edit in edits {
        match edit {
            Edit::Flip { at, bits } if !bytes.is_empty() => {
                let i = at % bytes.len();
                bytes[i] ^= bits;
            }
            Edit::Set { at, to } if !bytes.is_empty() => {
                let i = at % bytes.len();
                bytes[i] = *to;
            }
            Edit::Insert { at, bytes: new } => {
                let i = at % (bytes.len() + 1);
                bytes.splice(i..i, new.iter().copied());
            }
            Edit::Cut { at } => bytes.truncate(at % (bytes.len() + 1)),
            Edit::Grow { by } => bytes.extend_from_slice(by),
            _ => {}
        }
    }
}
