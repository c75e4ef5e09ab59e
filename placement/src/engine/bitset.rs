//! A growable dense bitset over provider slots.

/// A dense set of small integers (provider slots), 64 per word.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct BitSet {
    words: Vec<u64>,
}

impl BitSet {
    pub(crate) fn new() -> Self {
        Self { words: Vec::new() }
    }

    /// A set holding every slot in `0..len`.
    #[cfg(test)]
    pub(crate) fn full(len: usize) -> Self {
        let mut words = vec![u64::MAX; len.div_ceil(64)];
        if !len.is_multiple_of(64) {
            if let Some(last) = words.last_mut() {
                *last = (1u64 << (len % 64)) - 1;
            }
        }
        Self { words }
    }

    pub(crate) fn insert(&mut self, i: u32) {
        let w = (i / 64) as usize;
        if w >= self.words.len() {
            self.words.resize(w + 1, 0);
        }
        self.words[w] |= 1 << (i % 64);
    }

    pub(crate) fn remove(&mut self, i: u32) {
        let w = (i / 64) as usize;
        if let Some(word) = self.words.get_mut(w) {
            *word &= !(1 << (i % 64));
        }
    }

    pub(crate) fn contains(&self, i: u32) -> bool {
        self.words
            .get((i / 64) as usize)
            .is_some_and(|w| w & (1 << (i % 64)) != 0)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.words.iter().all(|w| *w == 0)
    }

    pub(crate) fn len(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// `self &= other`.
    pub(crate) fn intersect_with(&mut self, other: &BitSet) {
        for (i, w) in self.words.iter_mut().enumerate() {
            *w &= other.words.get(i).copied().unwrap_or(0);
        }
    }

    /// `self |= other`.
    pub(crate) fn union_with(&mut self, other: &BitSet) {
        if other.words.len() > self.words.len() {
            self.words.resize(other.words.len(), 0);
        }
        for (w, o) in self.words.iter_mut().zip(&other.words) {
            *w |= o;
        }
    }

    /// `self -= other`.
    pub(crate) fn difference_with(&mut self, other: &BitSet) {
        for (w, o) in self.words.iter_mut().zip(&other.words) {
            *w &= !o;
        }
    }

    /// Set members in increasing order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.words.iter().enumerate().flat_map(|(wi, &word)| {
            let mut w = word;
            std::iter::from_fn(move || {
                if w == 0 {
                    return None;
                }
                let bit = w.trailing_zeros();
                w &= w - 1;
                Some(wi as u32 * 64 + bit)
            })
        })
    }

    /// Heap bytes held.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.words.capacity() * 8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basic_ops() {
        let mut a = BitSet::new();
        a.insert(3);
        a.insert(130);
        assert!(a.contains(3) && a.contains(130) && !a.contains(4));
        assert_eq!(a.iter().collect::<Vec<_>>(), vec![3, 130]);
        let mut f = BitSet::full(131);
        assert_eq!(f.len(), 131);
        f.difference_with(&a);
        assert_eq!(f.len(), 129);
        f.intersect_with(&a);
        assert!(f.is_empty());
        a.remove(3);
        assert_eq!(a.len(), 1);
    }
}
