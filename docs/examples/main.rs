// The README's Rust example: sums the integers on stdin.  Run against
// cases: codefleet submit --file docs/examples/main.rs --case 'stdin=1 2,expect=3'
use std::io::Read;

fn main() {
    let mut input = String::new();
    std::io::stdin().read_to_string(&mut input).expect("stdin");
    let sum: i64 = input.split_whitespace().map(|w| w.parse::<i64>().expect("an integer")).sum();
    println!("{}", sum);
}
