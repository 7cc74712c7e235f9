//! The dmem controller's files (`dmem.capacity`, `dmem.current`, `dmem.max`, ...) and the
//! sizes `run --mem-max` takes: never panic; a parsed file has at most one entry per line,
//! each region printable ASCII; a size is what its digits say, scaled.
#![no_main]
use drmtool::dmem::{Knob, LimitRequest, parse, parse_size};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(lines) = parse(&text) {
        assert!(lines.len() <= text.lines().count());
        assert!(
            lines
                .iter()
                .all(|(r, _)| !r.is_empty() && r.bytes().all(|b| b.is_ascii_graphic()))
        );
    }
    if let Ok(n) = parse_size(&text) {
        let digits: String = text.trim().chars().take_while(char::is_ascii_digit).collect();
        let base: u64 = digits.parse().expect("a size starts with its digits");
        assert!(n == base || (base != 0 && n % base == 0 && n / base >= 1024));
    }
    for knob in [Knob::Max, Knob::Low, Knob::Min] {
        let _ = LimitRequest::parse(knob, &text);
    }
});
