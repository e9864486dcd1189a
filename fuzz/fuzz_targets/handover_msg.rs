//! A handover message (a client's session state crossing to a successor
//! process) from arbitrary bytes: decoding never panics, and whatever
//! decodes encodes back to a message that decodes to the same state.
#![no_main]
use libfuzzer_sys::fuzz_target;
use walnut::worker::Handed;

fuzz_target!(|data: &[u8]| {
    if let Some(h) = Handed::decode(data) {
        let again = h.encode();
        assert_eq!(Handed::decode(&again).as_ref(), Some(&h));
        assert!(again.len() <= data.len());
    }
});
