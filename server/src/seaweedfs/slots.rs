//! A direct-mapped table of shared values: each key has one slot (its index,
//! below the slot count, chosen by the caller), and a newer entry in a slot
//! replaces the older.
//! What the filer API's caches of prepared events and of rounds keep.

use std::sync::{Arc, Mutex};

pub struct Slots<K, V> {
    slots: Box<[Mutex<Option<(K, Arc<V>)>>]>,
}

impl<K: PartialEq, V> Slots<K, V> {
    pub fn new(count: usize) -> Slots<K, V> {
        Slots {
            slots: (0..count).map(|_| Mutex::new(None)).collect(),
        }
    }

    /// The value kept for `key` in slot `index`, if that slot holds it.
    pub fn get(&self, index: usize, key: &K) -> Option<Arc<V>> {
        match &*self.slot(index) {
            Some((held, value)) if held == key => Some(value.clone()),
            _ => None,
        }
    }

    /// Keeps `value` for `key` in slot `index`, replacing what it held.
    pub fn put(&self, index: usize, key: K, value: Arc<V>) {
        *self.slot(index) = Some((key, value));
    }

    fn slot(&self, index: usize) -> std::sync::MutexGuard<'_, Option<(K, Arc<V>)>> {
        self.slots[index].lock().unwrap_or_else(|e| e.into_inner())
    }
}
