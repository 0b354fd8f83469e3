//! Average queue allocation (RocketMQ's `AllocateMessageQueueAveragely`).

/// The slice of `queues` (sorted by the caller) that member `me` of the sorted `members`
/// consumes: consecutive blocks of `len / n` queues, the first `len % n` members taking one
/// more. Empty when `me` is not a member.
pub fn allocate_averagely<T: Clone, M: PartialEq>(queues: &[T], members: &[M], me: &M) -> Vec<T> {
    let Some(index) = members.iter().position(|m| m == me) else {
        return Vec::new();
    };
    let (len, n) = (queues.len(), members.len());
    if len == 0 {
        return Vec::new();
    }
    let rest = len % n;
    let size = if len <= n {
        1
    } else if rest > 0 && index < rest {
        len / n + 1
    } else {
        len / n
    };
    let start = if rest > 0 && index < rest {
        index * size
    } else {
        index * size + rest
    };
    if start >= len {
        return Vec::new();
    }
    queues[start..(start + size).min(len)].to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_queue_exactly_once() {
        for queues in 0..12usize {
            for members in 1..6usize {
                let q: Vec<usize> = (0..queues).collect();
                let m: Vec<usize> = (0..members).collect();
                let mut all: Vec<usize> = m
                    .iter()
                    .flat_map(|me| allocate_averagely(&q, &m, me))
                    .collect();
                all.sort_unstable();
                assert_eq!(all, q, "{queues} queues, {members} members");
            }
        }
        assert_eq!(
            allocate_averagely(&[1, 2, 3, 4, 5], &["a", "b"], &"a"),
            [1, 2, 3]
        );
        assert_eq!(
            allocate_averagely(&[1, 2, 3, 4, 5], &["a", "b"], &"b"),
            [4, 5]
        );
        assert!(allocate_averagely(&[1, 2], &["a"], &"z").is_empty());
    }
}
