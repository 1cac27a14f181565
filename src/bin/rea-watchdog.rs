fn main() {
    eprintln!("rea-watchdog: not built yet");
    std::process::exit(125);
}
