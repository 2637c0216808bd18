//! What can go wrong opening and writing the program's maps: the error the writer and the
//! counters share.

use aya::{
    Ebpf,
    maps::{Map, MapError},
};

#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("the XDP object has no map {0}")]
    MissingMap(&'static str),
    #[error("map {map}: {source}")]
    Map { map: &'static str, source: MapError },
    #[error("map {map}: cannot map it into memory: {source}")]
    Mmap {
        map: &'static str,
        source: std::io::Error,
    },
    #[error("waiting for the XDP program's running invocations failed: {0}")]
    Wait(std::io::Error),
    #[error("no random hash seed: {0}")]
    Seed(std::io::Error),
}

/// Turns a map error of `map` into a [`WriteError`].
pub fn map_err(map: &'static str) -> impl Fn(MapError) -> WriteError {
    move |source| WriteError::Map { map, source }
}

/// Takes map `name` out of the loaded object.
pub fn take(ebpf: &mut Ebpf, name: &'static str) -> Result<Map, WriteError> {
    ebpf.take_map(name).ok_or(WriteError::MissingMap(name))
}
