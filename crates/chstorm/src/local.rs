//! `chstorm local up|down|status`: a local ClickHouse for tests and demos.

use crate::cli::{LocalAction, LocalArgs};
use chstorm_local::{LocalServer, ServerInfo, ServerSpec};

fn print_info(info: &ServerInfo, json: bool) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(info)?);
        return Ok(());
    }
    println!("pid      {}", info.pid);
    println!("dir      {}", info.dir.display());
    println!("http     {}", info.http_url);
    println!("native   {}", info.native_url);
    if let Some(u) = &info.https_url {
        println!("https    {u}");
    }
    if let Some(u) = &info.native_tls_url {
        println!("native+tls {u}");
    }
    if let Some(ca) = &info.ca_cert {
        println!("ca cert  {}   (pass --cacert {} to chstorm bench)", ca.display(), ca.display());
    }
    Ok(())
}

pub fn run(args: LocalArgs) -> anyhow::Result<i32> {
    match args.action {
        LocalAction::Up(up) => {
            if let Some(info) = chstorm_local::status(&up.dir.dir)? {
                eprintln!("chstorm: a server is already running in {}", up.dir.dir.display());
                print_info(&info, up.dir.json)?;
                return Ok(0);
            }
            let mut spec = ServerSpec::new(&up.dir.dir);
            spec.tls = up.tls;
            spec.http_port = up.http_port;
            spec.tcp_port = up.tcp_port;
            let info = LocalServer::start(spec)?.detach();
            print_info(&info, up.dir.json)?;
            if !up.dir.json {
                println!("stop it with: chstorm local down --dir {}", up.dir.dir.display());
            }
            Ok(0)
        }
        LocalAction::Down(d) => {
            if chstorm_local::down(&d.dir)? {
                println!("stopped the server in {}", d.dir.display());
            } else {
                println!("no server running in {}", d.dir.display());
            }
            Ok(0)
        }
        LocalAction::Status(d) => match chstorm_local::status(&d.dir)? {
            Some(info) => {
                print_info(&info, d.json)?;
                Ok(0)
            }
            None => {
                println!("no server running in {}", d.dir.display());
                Ok(1)
            }
        },
    }
}
