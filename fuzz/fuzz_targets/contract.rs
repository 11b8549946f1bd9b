#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(broken) = probity_properties::contract(data) {
        panic!("contract: {broken}");
    }
});
