//! Compiles `proto/latticekv.proto` and `proto/faas.proto` with protox (a pure-Rust protobuf compiler, so building
//! needs no `protoc` on the machine) and generates the Rust types with prost.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/latticekv.proto");
    println!("cargo:rerun-if-changed=proto/faas.proto");
    let descriptors = protox::compile(["proto/latticekv.proto", "proto/faas.proto"], ["proto"])?;
    prost_build::Config::new()
        .bytes(["."])
        // Ordered maps: encodings of equal values are equal bytes (anti-entropy digests).
        .btree_map(["."])
        .compile_fds(descriptors)?;
    Ok(())
}
