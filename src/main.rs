fn main() -> std::process::ExitCode {
    leaderd::main()
}
