//! test bed
