fn main() -> std::process::ExitCode {
    leaderd::cli::main()
}
