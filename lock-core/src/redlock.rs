//! RedLock over independent Redis masters. (Being written.)
